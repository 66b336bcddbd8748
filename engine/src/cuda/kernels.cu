// vramlab's CUDA kernels, compiled at run time with NVRTC (see kernels.rs).
extern "C" __global__ void fill_f32(float* y, float v, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = v;
}
