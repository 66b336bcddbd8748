"""A torch that cannot be imported: the capture test of a Python without torch."""
raise ImportError("no torch in this test environment")
