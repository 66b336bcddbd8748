//! `estimate`'s flags and help text, and `--search`'s `NAME=LO..HI` parser.

use std::path::PathBuf;

use clap::Args;
use vramlab_engine::alloc::AllocatorConfig;

use super::replay::parse_capacity;
use crate::size::Size;

pub const ABOUT: &str =
    "Estimate a PyTorch program's GPU memory with no GPU: the peak, the OOM point, the largest batch that fits";

pub const LONG_ABOUT: &str = "\
Run CMD (python train.py ...) unmodified on this machine with no GPU: CUDA tensors hold no
data, and every request PyTorch's CUDA caching allocator would receive is captured (size,
free, stream, Python stack), plus the requests a GPU makes that tensor-level capture cannot
see (cuBLAS workspaces, reduction staging, ...), each modelled by a named rule. The capture is
replayed through vramlab's model of the caching allocator: peak allocated and reserved
memory, whether and where it runs out of memory under --capacity (default: the assumed GPU's
memory) and --fraction, by how much, who holds the peak, and with --sweep the allocator
settings that fit. Everything it prints is an estimate and says so, with the GPU and torch it
assumed; the program's own torch is used.

--out writes the capture as a PyTorch memory snapshot (the replay under the settings asked,
on an unlimited device), marked as an estimate: `vramlab replay`, `whatif`, `diff`, `check`
and the pages all read it and say it is one.

--search 'NAME=LO..HI' replaces the word NAME in CMD's arguments (alone or inside one, as in
--batch=NAME) by a value and bisects over real captures (not a scaled trace) for the largest
value that fits --capacity under each setting, with its headroom; each answer is confirmed
by the captures at the value and one above it. Progress goes to stderr.

A program that cannot run this way (a data-dependent .item() such as GradScaler's step,
nonzero, CUDA graph capture, torch.compile's Inductor, custom CUDA extensions) is refused with
the op and the line of your code; nothing is written.";

pub const AFTER_HELP: &str = "\
Examples:
  vramlab estimate -- python train.py --batch 64
  vramlab estimate --capacity 24GiB --sweep -- python train.py --batch 64
  vramlab estimate --out est.pickle --json -- python train.py
  vramlab estimate --capacity 24GiB --search 'BATCH=1..1024' -- python train.py --batch BATCH
  vramlab estimate --gpu a100-40gb -- python train.py

Exit status: 0 when the estimate was made (running out of memory is a result); 2 for usage
errors and when the program was refused (an op that cannot run without a GPU); 1 when the
program failed, torch could not be imported, or --out could not be written.";

#[derive(Debug, Args)]
pub struct EstimateArgs {
    /// Memory of the simulated device, e.g. 24GiB [default: the assumed GPU's]
    #[arg(long, value_name = "SIZE", value_parser = parse_capacity, allow_hyphen_values = true)]
    pub capacity: Option<Size>,

    /// torch.cuda.set_per_process_memory_fraction(F): the program may reserve F x --capacity
    #[arg(long, value_name = "F", value_parser = parse_fraction)]
    pub fraction: Option<f64>,

    /// The program's PYTORCH_CUDA_ALLOC_CONF [default: the environment's, else PyTorch's defaults]
    #[arg(long, value_name = "STR", value_parser = AllocatorConfig::parse)]
    pub alloc_conf: Option<AllocatorConfig>,

    /// Also try a grid of allocator settings and recommend the best that fits
    #[arg(long)]
    pub sweep: bool,

    /// Write the capture, replayed, as a PyTorch memory snapshot marked as an estimate
    #[arg(long, value_name = "FILE.pickle")]
    pub out: Option<PathBuf>,

    /// Print one JSON object instead of the text
    #[arg(long)]
    pub json: bool,

    /// Bisect over captures for the largest value of NAME in [LO, HI] that fits --capacity
    #[arg(long, value_name = "NAME=LO..HI", value_parser = parse_search)]
    pub search: Option<Search>,

    /// The GPU to assume: a preset (h100, h200, a100, a100-40gb, l4) with optional overrides
    /// (h100,memory=64GiB,sms=114,cc=9.0), or name=...,memory=...,sms=...,cc=... [default: h100]
    #[arg(long, value_name = "GPU")]
    pub gpu: Option<String>,

    /// Rows of the "who holds memory at the peak" table
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,

    /// The command and its arguments, after `--`
    #[arg(value_name = "CMD", required = true, trailing_var_arg = true, allow_hyphen_values = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// `--search NAME=LO..HI`: the word to replace and the range, both ends included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    pub name: String,
    pub lo: u64,
    pub hi: u64,
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!("'{s}' is not a fraction in (0, 1]")),
    }
}

/// Reads `BATCH=1..1024`.
pub fn parse_search(s: &str) -> Result<Search, String> {
    let bad = |why: &str| format!("'{s}' is not NAME=LO..HI ({why}), e.g. BATCH=1..1024");
    let (name, range) = s.split_once('=').ok_or_else(|| bad("no '='"))?;
    let name = name.trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(bad("NAME is letters, digits and '_'"));
    }
    let (lo, hi) = range.split_once("..").ok_or_else(|| bad("no '..' between LO and HI"))?;
    let number = |t: &str| t.trim().parse::<u64>().map_err(|_| bad("LO and HI are whole numbers"));
    let (lo, hi) = (number(lo)?, number(hi)?);
    if lo > hi {
        return Err(bad("LO is above HI"));
    }
    Ok(Search { name: name.to_owned(), lo, hi })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_is_a_name_and_a_range() {
        assert_eq!(parse_search("BATCH=1..1024"), Ok(Search { name: "BATCH".into(), lo: 1, hi: 1024 }));
        assert_eq!(parse_search(" N = 8 .. 8").map(|s| (s.lo, s.hi)), Ok((8, 8)));
        assert!(parse_search("BATCH=9..1").unwrap_err().contains("LO is above HI"));
        assert!(parse_search("BATCH:1..9").unwrap_err().contains("no '='"));
        assert!(parse_search("BATCH=1-9").unwrap_err().contains("no '..'"));
        assert!(parse_search("--b=1..9").unwrap_err().contains("NAME is letters"));
    }

    #[test]
    fn a_fraction_is_in_0_1() {
        assert_eq!(parse_fraction("0.5"), Ok(0.5));
        assert!(parse_fraction("0").is_err() && parse_fraction("1.5").is_err() && parse_fraction("x").is_err());
    }
}
