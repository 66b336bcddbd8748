//! The `vramlab_estimate` marker read from the pickle's values into its
//! model (`estimate.rs`), each wrong field an error naming its path.

use super::error::SnapshotError;
use super::estimate::{AssumedGpuInfo, ESTIMATE_KEY, ESTIMATE_VERSION, Estimate, ModelledRule, Scalar};
use super::heap::Heap;
use super::value::Value;

/// Reads the marker's dict.
pub(crate) fn estimate(heap: &Heap, v: Value) -> Result<Estimate, SnapshotError> {
    let Value::Dict(d) = v else { return Err(shape(ESTIMATE_KEY.to_owned(), "a dict", heap, v)) };
    let version = int(heap, heap.get(d, "version"), "version")?;
    if version != ESTIMATE_VERSION {
        return Err(SnapshotError::Shape {
            path: format!("{ESTIMATE_KEY}.version"),
            expected: "version 1 (a newer vramlab wrote this estimate: use it)",
            found: format!("version {version}"),
        });
    }
    let Some(Value::Dict(g)) = heap.get(d, "gpu") else {
        let found = heap.get(d, "gpu").unwrap_or(Value::None);
        return Err(shape(format!("{ESTIMATE_KEY}.gpu"), "a dict of the assumed GPU's properties", heap, found));
    };
    let known = ["name", "total_memory", "sm_count", "major", "minor"];
    let other = heap.dicts[g as usize]
        .iter()
        .filter_map(|&(k, v)| {
            let Value::Str(k) = k else { return None };
            let key = heap.str(k);
            if known.contains(&key) {
                return None;
            }
            let value = match v {
                Value::Bool(b) => Scalar::Bool(b),
                Value::Int(n) => Scalar::Int(n),
                Value::Float(f) => Scalar::Float(f),
                Value::Str(s) => Scalar::Str(heap.str(s).to_owned()),
                _ => return None,
            };
            Some((key.to_owned(), value))
        })
        .collect();
    let gpu = AssumedGpuInfo {
        name: string(heap, heap.get(g, "name"), "gpu.name")?,
        total_memory: count(heap, heap.get(g, "total_memory"), "gpu.total_memory")?,
        sm_count: count(heap, heap.get(g, "sm_count"), "gpu.sm_count")?,
        major: int(heap, heap.get(g, "major"), "gpu.major")?,
        minor: int(heap, heap.get(g, "minor"), "gpu.minor")?,
        other,
    };
    let mut rules = Vec::new();
    for (i, r) in list(heap, heap.get(d, "rules"), "rules")?.into_iter().enumerate() {
        let Value::Dict(r) = r else { return Err(shape(format!("{ESTIMATE_KEY}.rules[{i}]"), "a dict", heap, r)) };
        rules.push(ModelledRule {
            name: string(heap, heap.get(r, "name"), &format!("rules[{i}].name"))?,
            count: count(heap, heap.get(r, "count"), &format!("rules[{i}].count"))?,
            bytes: count(heap, heap.get(r, "bytes"), &format!("rules[{i}].bytes"))?,
            why: string(heap, heap.get(r, "why"), &format!("rules[{i}].why"))?,
            bound: match heap.get(r, "bound") {
                None | Some(Value::None) => None,
                b => Some(string(heap, b, &format!("rules[{i}].bound"))?),
            },
        });
    }
    let argv = list(heap, heap.get(d, "argv"), "argv")?
        .into_iter()
        .enumerate()
        .map(|(i, a)| string(heap, Some(a), &format!("argv[{i}]")))
        .collect::<Result<_, _>>()?;
    Ok(Estimate {
        version,
        torch: string(heap, heap.get(d, "torch"), "torch")?,
        gpu,
        rules,
        capture_s: seconds(heap, heap.get(d, "capture_s"), "capture_s")?,
        startup_s: seconds(heap, heap.get(d, "startup_s"), "startup_s")?,
        argv,
    })
}

fn shape(path: String, expected: &'static str, heap: &Heap, found: Value) -> SnapshotError {
    let found = match found {
        Value::Str(s) => format!("the str '{}'", heap.str(s).chars().take(60).collect::<String>()),
        Value::Int(n) => format!("the int {n}"),
        other => format!("a {}", other.type_name()),
    };
    SnapshotError::Shape { path, expected, found }
}

fn string(heap: &Heap, v: Option<Value>, field: &str) -> Result<String, SnapshotError> {
    match v {
        Some(Value::Str(s)) => Ok(heap.str(s).to_owned()),
        other => Err(shape(format!("{ESTIMATE_KEY}.{field}"), "a str", heap, other.unwrap_or(Value::None))),
    }
}

fn int(heap: &Heap, v: Option<Value>, field: &str) -> Result<i64, SnapshotError> {
    match v {
        Some(Value::Int(n)) => Ok(n),
        other => Err(shape(format!("{ESTIMATE_KEY}.{field}"), "an int", heap, other.unwrap_or(Value::None))),
    }
}

fn count(heap: &Heap, v: Option<Value>, field: &str) -> Result<u64, SnapshotError> {
    match v {
        Some(Value::Int(n)) if n >= 0 => Ok(n as u64),
        other => {
            Err(shape(format!("{ESTIMATE_KEY}.{field}"), "a non-negative int", heap, other.unwrap_or(Value::None)))
        }
    }
}

fn seconds(heap: &Heap, v: Option<Value>, field: &str) -> Result<f64, SnapshotError> {
    match v {
        Some(Value::Float(f)) if f >= 0.0 => Ok(f),
        Some(Value::Int(n)) if n >= 0 => Ok(n as f64),
        // Absent: not measured.
        None => Ok(0.0),
        Some(other) => Err(shape(format!("{ESTIMATE_KEY}.{field}"), "seconds (a float)", heap, other)),
    }
}

fn list(heap: &Heap, v: Option<Value>, field: &str) -> Result<Vec<Value>, SnapshotError> {
    match v {
        Some(Value::List(l)) => Ok(heap.lists[l as usize].clone()),
        Some(Value::Tuple(t)) => Ok(heap.tuples[t as usize].to_vec()),
        None => Ok(Vec::new()),
        Some(other) => Err(shape(format!("{ESTIMATE_KEY}.{field}"), "a list", heap, other)),
    }
}
