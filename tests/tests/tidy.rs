//! The tidy test: the architecture's rules that Cargo and the compiler do not
//! check, checked over the real tree (in the manner of rust-analyzer's
//! `xtask/src/tidy.rs`). Each rule is a function over in-memory inputs, so a
//! unit test can plant a violation and see it reported; `the_tree_is_tidy`
//! runs every rule over the workspace.
//!
//! The rules (ARCHITECTURE.md, "Invariants"):
//! 1. **Direction.** Crates depend only downwards along
//!    display, rng, allocator, cpu-kernels → replay → snapshot → engine (runtime) →
//!    train → profiler → suites → reports → xtask → tests; the allocator
//!    model, the CPU kernels and the generator depend on no other engine crate
//!    but the generator, and the allocator's library on none at all (its tests
//!    may draw from the generator). Normal, build and dev dependencies alike.
//! 2. **Native libraries.** cudarc is a dependency of the runtime only;
//!    nvml-wrapper of the profiler only.
//! 3. **Writers.** Only `reports` writes files, and xtask's GPU bundle builder
//!    (`xtask/src/gpu_check.rs`). A write is a call that creates, changes,
//!    renames or removes a file or folder (`fs::write`, `File::create`,
//!    `OpenOptions`, `fs::rename`, `fs::copy`, `create_dir…`, `remove_…`,
//!    `set_permissions`). Test code may write (fixtures, temporary folders):
//!    `tests/`, `benches/` and `examples/` folders, and `#[cfg(test)]` items.
//! 4. **Headers.** Every Rust source file opens with a `//!` comment saying
//!    what it holds.
//! 5. **One seeded generator.** Random numbers come from `vramlab-rng`: no
//!    workspace crate depends on a random-number crate (`proptest`, a test
//!    tool with its own, is not one), and no source outside `engine/rng`
//!    carries a generator's constants (SplitMix64's, xorshift64*'s).
//! 6. **The maps are true.** Each crate's `src/lib.rs` (or `src/main.rs`
//!    where it has no library) opens with the crate's file map: every path
//!    that header names in backticks exists (read relative to the crate's
//!    folder, or its `src/`; `shared/…` names the design documents beside the
//!    repository, which tidy does not read), and every Rust file of the crate (`src/`,
//!    `tests/`, `benches/`, `examples/`) is named there, or a folder holding
//!    it is. ARCHITECTURE.md names crates and key files: every path it names
//!    in backticks exists, read in its place — relative to the root, to the
//!    crate of the section it is in (and its `src/`), or to the folder of the
//!    list item it is in (`- \`cuda/\` — … \`libs.rs\``).
//! 7. **Short functions.** No function outside test code is over 150 lines,
//!    from its `fn` line to its closing brace (test code: `#[cfg(test)]`
//!    items, and files under `tests/`, `benches/`, `examples/`, `fuzz/`).
//!    Braces in strings, characters and comments do not count.
//! 8. **Short front documents.** README.md and ARCHITECTURE.md are at most
//!    400 lines each: the guide is `docs/`, and each crate's details are in
//!    its own file map.
//! 9. **No circles between files.** Inside a crate, imports between files
//!    point one way: no files of a crate's `src/` import each other, directly
//!    or round through others. A file imports another when its code outside
//!    test items names a path into that file's module (the longest prefix of
//!    the path that is a file's module): `use crate::a::X`, `use super::X`,
//!    `self::a::X`, a parent's `use child::X` or `pub use child::X`, and
//!    `crate::`, `super::`, `self::` paths written inline. `mod child;` is no
//!    import; a name a module imports (`pub use a::X`) leads on to where it
//!    comes from. Binaries (`src/bin/`, a `main.rs` beside a `lib.rs`) are
//!    crates of their own and not read.
//! 10. **Inside the repository.** No source file (tests included) names a
//!     path beside or above the repository, such as `../shared/fixtures`
//!     from a crate: a test reads only what the repository holds, so a fresh
//!     clone runs every test. Comments may name such paths.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use vramlab_tests::workspace_root;

/// The layers, lowest first; a crate may depend on crates of lower layers only.
const LAYERS: &[&[&str]] = &[
    &["vramlab-rng", "vramlab-display"],
    &["vramlab-allocator", "vramlab-cpu-kernels"],
    &["vramlab-replay"],
    &["vramlab-snapshot"],
    &["vramlab-engine"],
    &["vramlab-train"],
    &["vramlab-profiler"],
    &["vramlab-suites"],
    &["vramlab-reports"],
    &["xtask"],
    &["vramlab-python"],
    &["vramlab-tests"],
];

/// The crate whose library depends on no other workspace crate.
const SELF_CONTAINED: &str = "vramlab-allocator";

/// Native-library bindings and the one crate allowed to link each.
const NATIVE: &[(&str, &str)] = &[("cudarc", "vramlab-engine"), ("nvml-wrapper", "vramlab-profiler")];

/// Crates that may write files anywhere in their source.
const WRITER_CRATES: &[&str] = &["vramlab-reports"];
/// Single files of other crates that may write files.
const WRITER_FILES: &[&str] = &["xtask/src/gpu_check.rs"];

/// Calls that create, change, rename or remove files or folders.
const WRITE_CALLS: &[&str] = &[
    "fs::write(",
    "File::create(",
    "File::create_new(",
    "OpenOptions",
    "fs::rename(",
    "fs::copy(",
    "fs::create_dir(",
    "fs::create_dir_all(",
    "fs::remove_file(",
    "fs::remove_dir(",
    "fs::remove_dir_all(",
    "fs::set_permissions(",
    "fs::hard_link(",
];

/// Random-number crates; the workspace draws from `vramlab-rng` instead.
const RANDOM_CRATES: &[&str] =
    &["rand", "rand_core", "rand_chacha", "rand_pcg", "rand_xoshiro", "fastrand", "oorandom", "nanorand", "getrandom"];
/// The multipliers of SplitMix64 and xorshift64*, lower case, without `_`.
const GENERATOR_CONSTANTS: &[&str] = &["9e3779b97f4a7c15", "bf58476d1ce4e5b9", "94d049bb133111eb", "2545f4914f6cdd1d"];
/// The generator's own folder.
const GENERATOR_DIR: &str = "engine/rng";

/// One workspace crate as the rules see it.
#[derive(Debug, Clone)]
struct Krate {
    name: String,
    /// Folder of its `Cargo.toml`, relative to the workspace root.
    dir: PathBuf,
    /// (dependency name, kind: "normal", "dev" or "build").
    deps: Vec<(String, String)>,
}

fn layer_of(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&name))
}

/// Rule 1: every dependency on a workspace crate points to a lower layer.
fn check_direction(krates: &[Krate]) -> Vec<String> {
    let mut errors = Vec::new();
    for k in krates {
        let Some(own) = layer_of(&k.name) else {
            errors.push(format!(
                "{}: a crate the tidy test does not know — place it in LAYERS (tests/tests/tidy.rs) and in ARCHITECTURE.md",
                k.name
            ));
            continue;
        };
        for (dep, kind) in &k.deps {
            if let Some(theirs) = layer_of(dep)
                && theirs >= own
            {
                errors.push(format!(
                    "{} ({}/Cargo.toml): {kind} dependency on {dep} points against the direction \
                     display, rng, allocator, cpu-kernels → replay → snapshot → engine → train → profiler → suites → reports → xtask",
                    k.name,
                    k.dir.display()
                ));
            } else if k.name == SELF_CONTAINED && kind == "normal" && layer_of(dep).is_some() {
                errors.push(format!(
                    "{} ({}/Cargo.toml): depends on {dep}; the allocator model's library uses no other \
                     vramlab crate (a test or bench may, as a dev-dependency)",
                    k.name,
                    k.dir.display()
                ));
            }
        }
    }
    errors
}

/// Rule 2: each native binding is a dependency of its one crate only.
fn check_native(krates: &[Krate]) -> Vec<String> {
    let mut errors = Vec::new();
    for k in krates {
        for (dep, kind) in &k.deps {
            if let Some((lib, owner)) = NATIVE.iter().find(|(lib, _)| lib == dep)
                && k.name != *owner
            {
                errors.push(format!(
                    "{} ({}/Cargo.toml): {kind} dependency on {lib}, which only {owner} may link",
                    k.name,
                    k.dir.display()
                ));
            }
        }
    }
    errors
}

/// Rule 5a: no crate depends on a random-number crate.
fn check_random_deps(krates: &[Krate]) -> Vec<String> {
    let mut errors = Vec::new();
    for k in krates {
        for (dep, kind) in &k.deps {
            if RANDOM_CRATES.contains(&dep.as_str()) {
                errors.push(format!(
                    "{} ({}/Cargo.toml): {kind} dependency on {dep}; draw from vramlab_rng::Rng (engine/rng), the \
                     workspace's one seeded generator",
                    k.name,
                    k.dir.display()
                ));
            }
        }
    }
    errors
}

/// Rule 5b: a generator written out again, found by its constants.
fn check_generator_copy(path: &Path, source: &str) -> Vec<String> {
    // The generator itself, and this file, which names the constants.
    if path.starts_with(GENERATOR_DIR) || path == Path::new(file!()) {
        return Vec::new();
    }
    let mut errors = Vec::new();
    for (n, line) in source.lines().enumerate() {
        let flat: String = line.chars().filter(|c| *c != '_').collect::<String>().to_ascii_lowercase();
        if let Some(c) = GENERATOR_CONSTANTS.iter().find(|c| flat.contains(*c)) {
            errors.push(format!(
                "{}:{}: a random generator's constant (0x{c}); use vramlab_rng::Rng instead of a copy",
                path.display(),
                n + 1
            ));
        }
    }
    errors
}

/// The lines of `source` outside `#[cfg(test)]` items, with their 0-based
/// index. A `#[cfg(test)]` item runs from the attribute to the `}` closing its
/// first `{` (braces counted naively: a brace in a string literal would confuse
/// it) or to a `;` before any brace.
fn non_test_lines(source: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut pending = false; // saw #[cfg(test)], the item not opened yet
    let mut depth = 0i64; // brace depth inside a test item
    for (i, line) in source.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        if !pending && depth == 0 && code.starts_with("#[cfg(test)]") {
            pending = true;
        }
        if pending || depth > 0 {
            for c in code.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        pending = false;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if pending && code.ends_with(';') {
                pending = false;
            }
            continue;
        }
        out.push((i, line));
    }
    out
}

/// Whether `path` (relative to the root) holds only test, bench or example code.
fn is_test_path(path: &Path) -> bool {
    path.components().any(|c| matches!(c.as_os_str().to_str(), Some("tests" | "benches" | "examples")))
}

/// Rule 3: file writes in `path` (relative), a file of crate `krate`.
fn check_writes(krate: &str, path: &Path, source: &str) -> Vec<String> {
    if WRITER_CRATES.contains(&krate) || is_test_path(path) || WRITER_FILES.iter().any(|f| path == Path::new(f)) {
        return Vec::new();
    }
    let mut errors = Vec::new();
    for (n, line) in non_test_lines(source) {
        let code = line.split("//").next().unwrap_or("");
        if let Some(call) = WRITE_CALLS.iter().find(|c| code.contains(*c)) {
            errors.push(format!(
                "{}:{}: `{}` writes a file in {krate}; only vramlab-reports writes files \
                 (persist through a store interface implemented there)",
                path.display(),
                n + 1,
                call.trim_end_matches('(')
            ));
        }
    }
    errors
}

/// Rule 4: the file opens with a `//!` header.
fn check_header(path: &Path, source: &str) -> Option<String> {
    let first = source.lines().map(str::trim).find(|l| !l.is_empty());
    match first {
        Some(l) if l.starts_with("//!") => None,
        _ => Some(format!("{}: no `//!` header — open the file with a line saying what it holds", path.display())),
    }
}

/// The workspace's crates from `cargo metadata`.
fn workspace_crates(root: &Path) -> Vec<Krate> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root)
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let manifest = Path::new(p["manifest_path"].as_str().unwrap());
            let dir = manifest.parent().unwrap().strip_prefix(root).unwrap_or(manifest).to_path_buf();
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| {
                    let kind = d["kind"].as_str().unwrap_or("normal").to_owned();
                    (d["name"].as_str().unwrap().to_owned(), kind)
                })
                .collect();
            Krate { name: p["name"].as_str().unwrap().to_owned(), dir, deps }
        })
        .collect()
}

/// Every `.rs` file under `dir`, skipping `target` folders.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Extensions of the file names rule 6 reads as paths.
const MAP_EXTENSIONS: &[&str] =
    &["rs", "md", "toml", "py", "sh", "html", "css", "js", "json", "jsonl", "pickle", "ttf", "txt", "cu", "yml"];

/// A backticked token of ARCHITECTURE.md that reads as a path: a folder
/// (`engine/allocator/`) or a file with a known extension (`caching.rs`,
/// `tests/tidy.rs`); placeholders (`NAME.json`, `<suite>.csv`, globs) are not.
fn map_path(token: &str) -> Option<&str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    if token.starts_with('/') {
        return None; // a path of some machine, not of the tree
    }
    // `../shared/…`: the folder beside the repository, read as `shared/…`.
    let token = token.strip_prefix("../").unwrap_or(token);
    if token.is_empty() || !token.chars().all(plain) || token.starts_with('.') && token.len() < 3 {
        return None;
    }
    // Paths of the build's output and of PyTorch's tree are not this tree's.
    if ["target/", "torch/", "c10/"].iter().any(|p| token.starts_with(p)) {
        return None;
    }
    if token.chars().any(|c| c.is_ascii_uppercase()) && !token.ends_with(".md") && !token.contains("LICENSE") {
        return None; // NAME.stats.json, DIR/…: placeholders
    }
    if token.ends_with('/') && token.len() > 1 {
        return Some(token);
    }
    let ext = token.rsplit_once('.').map(|(_, e)| e)?;
    // A bare file name other than a Rust source (`results.json`, `index.html`)
    // is usually a file the program writes, not one of the tree.
    (MAP_EXTENSIONS.contains(&ext) && (ext == "rs" || token.contains('/'))).then_some(token)
}

/// Where a name in ARCHITECTURE.md points: the candidates of `token` in its
/// contexts (root, the section's crate and its `src/`, the list item's folder),
/// and, when none exists, any file or folder of the section's tree whose path
/// ends with it.
fn resolve_map_path(token: &str, contexts: &[PathBuf], tree: &[PathBuf]) -> Vec<PathBuf> {
    let t = token.trim_end_matches('/');
    let mut found: Vec<PathBuf> = contexts.iter().map(|c| c.join(t)).filter(|p| tree.contains(p)).collect();
    if found.is_empty() {
        let within = contexts.get(1).cloned().unwrap_or_default();
        found = tree
            .iter()
            .filter(|p| p.starts_with(&within) && (p.ends_with(t) || p.to_string_lossy().ends_with(&format!("/{t}"))))
            .cloned()
            .collect();
    }
    found
}

/// Rule 6b over the text of ARCHITECTURE.md and the repository's files and
/// folders (`tree`, relative paths): every path it names exists.
fn check_architecture(text: &str, tree: &[PathBuf]) -> Vec<String> {
    let mut errors = Vec::new();
    let mut section = PathBuf::new();
    // (indent, folder) of the open list items that name a folder first.
    let mut items: Vec<(usize, PathBuf)> = Vec::new();
    let mut in_code = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let tokens: Vec<&str> = line.split('`').skip(1).step_by(2).collect();
        if line.starts_with('#') {
            items.clear();
            section = tokens.iter().filter_map(|t| map_path(t)).find(|t| t.ends_with('/')).map_or_else(
                || if line.starts_with("## ") { PathBuf::new() } else { section.clone() },
                |t| PathBuf::from(t.trim_end_matches('/')),
            );
        }
        let indent = line.len() - line.trim_start().len();
        let item = line.trim_start().starts_with("- ");
        if item || line.trim().is_empty() {
            items.retain(|(i, _)| *i < indent && !line.trim().is_empty());
        }
        let mut contexts = vec![PathBuf::new(), section.clone(), section.join("src")];
        for (_, folder) in items.iter().rev() {
            contexts.insert(1, folder.clone());
        }
        for (k, token) in tokens.iter().enumerate() {
            let Some(path) = map_path(token) else { continue };
            if path.starts_with("shared/") {
                continue; // beside the repository: not read (rule 10)
            }
            let found = resolve_map_path(path, &contexts, tree);
            if found.is_empty() {
                errors.push(format!(
                    "ARCHITECTURE.md:{}: `{path}` names nothing in the tree (read in {}); fix the name or the text",
                    n + 1,
                    contexts[1..].iter().map(|c| c.display().to_string()).collect::<Vec<_>>().join(", ")
                ));
                continue;
            }
            if k == 0 && item && path.ends_with('/') && line.trim_start().starts_with(&format!("- `{path}`")) {
                items.push((indent, found[0].clone()));
            }
        }
    }
    errors
}

/// The file holding crate `dir`'s map: `src/lib.rs`, else `src/main.rs`.
fn map_file(dir: &Path, tree: &[PathBuf]) -> PathBuf {
    let lib = dir.join("src/lib.rs");
    if tree.contains(&lib) { lib } else { dir.join("src/main.rs") }
}

/// The `//!` header of a Rust source as one text (the `//!` markers removed),
/// and the 1-based line each of its lines came from.
fn header_text(source: &str) -> (String, Vec<usize>) {
    let mut text = String::new();
    let mut lines = Vec::new();
    for (n, line) in source.lines().enumerate() {
        let Some(doc) = line.trim_start().strip_prefix("//!") else {
            if line.trim().is_empty() && lines.is_empty() {
                continue;
            }
            break;
        };
        text.push_str(doc);
        text.push('\n');
        lines.push(n + 1);
    }
    (text, lines)
}

/// `token` (a backticked name of a crate's header) read as a path, relative to
/// the crate: the same names as ARCHITECTURE.md's (`map_path`), with a leading
/// `../` kept.
fn header_path(token: &str) -> Option<&str> {
    if token.starts_with("../") { map_path(token).map(|_| token) } else { map_path(token) }
}

/// Rule 6a: crate `dir`'s file map, the `//!` header of `map_file` (both
/// relative to the root), against the repository's files and folders (`tree`)
/// and the crate's Rust files (`sources`: those under its `src/`, `tests/`,
/// `benches/` and `examples/`).
fn check_crate_map(dir: &Path, map_file: &Path, source: &str, tree: &[PathBuf], sources: &[PathBuf]) -> Vec<String> {
    let mut errors = Vec::new();
    let (header, lines) = header_text(source);
    let mut named: Vec<PathBuf> = Vec::new();
    // The folder a list item names first (`- `src/check/` — `mod.rs`, …`): its
    // later names, on its line and its continuation lines, may be read in it.
    let mut item: Option<(usize, PathBuf)> = None;
    for (line, &here) in header.lines().zip(&lines) {
        let indent = line.len() - line.trim_start().len();
        let is_item = line.trim_start().starts_with("- ");
        if line.trim().is_empty() || (is_item && item.as_ref().is_some_and(|(i, _)| *i >= indent)) {
            item = None;
        }
        for (k, token) in line.split('`').skip(1).step_by(2).enumerate() {
            let Some(path) = header_path(token) else { continue };
            let path = path.trim_end_matches('/');
            // `shared/…`: the design documents beside the repository, not read (rule 10).
            if path.starts_with("shared/") {
                continue;
            }
            let mut candidates = vec![dir.join(path), dir.join("src").join(path)];
            if let Some((_, folder)) = &item {
                candidates.push(folder.join(path));
            }
            let found: Vec<PathBuf> =
                candidates.iter().filter_map(|c| normalize(c)).filter(|c| tree.contains(c)).collect();
            if found.is_empty() {
                let places = match &item {
                    Some((_, f)) => format!("{}/, {}/src/ and {}/", dir.display(), dir.display(), f.display()),
                    None => format!("{}/ and {}/src/", dir.display(), dir.display()),
                };
                errors.push(format!(
                    "{}:{here}: `{token}` names nothing in the tree (read relative to {places}); fix the name or the text",
                    map_file.display()
                ));
                continue;
            }
            if k == 0 && is_item && token.ends_with('/') && line.trim_start().starts_with(&format!("- `{token}`")) {
                item = Some((indent, found[0].clone()));
            }
            named.extend(found);
        }
    }
    for source in sources {
        if !named.iter().any(|p| source.starts_with(p)) {
            errors.push(format!(
                "{}: not named in {}'s file map (its `//!` header), nor a folder holding it; say what it holds there",
                source.display(),
                map_file.display()
            ));
        }
    }
    errors
}

/// `path` with `.` and `..` resolved lexically; `None` when it climbs above the root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            c => out.push(c),
        }
    }
    Some(out)
}

/// The longest a function outside test code may be, in lines.
const FN_LIMIT: usize = 150;

/// Whether `path` (relative to the root) holds only test, bench, example or fuzz code.
fn is_test_code_path(path: &Path) -> bool {
    is_test_path(path) || path.components().any(|c| c.as_os_str() == "fuzz")
}

/// `source` with the insides of comments, strings and character literals
/// blanked (newlines kept), so that braces, `fn` and attributes there do not
/// count. Lifetimes (`'a`) are code; raw strings (`r#"…"#`) and nested block
/// comments are read as Rust reads them.
fn code_only(source: &str) -> Vec<char> {
    let s: Vec<char> = source.chars().collect();
    let mut out = s.clone();
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in &mut out[from.min(s.len())..to.min(s.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            let end = s[i..].iter().position(|&c| c == '\n').map_or(s.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if c == '/' && next == Some('*') {
            let (mut depth, mut j) = (0usize, i);
            while j < s.len() {
                if s[j] == '/' && s.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if s[j] == '*' && s.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if ident(c) {
            // A whole word, so that an `r` or `b` inside a name starts nothing.
            let end = i + s[i..].iter().take_while(|&&c| ident(c)).count();
            let word: String = s[i..end].iter().collect();
            let hashes = s[end..].iter().take_while(|&&c| c == '#').count();
            if matches!(word.as_str(), "r" | "br" | "cr") && s.get(end + hashes) == Some(&'"') {
                // r"…", r#"…"#: no escapes; it ends at `"` and as many `#`.
                let start = end + hashes + 1;
                let mut j = start;
                while j < s.len()
                    && !(s[j] == '"' && s[j + 1..].iter().take(hashes).filter(|&&c| c == '#').count() == hashes)
                {
                    j += 1;
                }
                blank(&mut out, start, j);
                i = j + 1 + hashes;
            } else {
                // b"…", c"…" and b'…' are read next as plain literals.
                i = end;
            }
        } else if c == '"' {
            let mut j = i + 1;
            while j < s.len() && s[j] != '"' {
                j += if s[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i + 1, j);
            i = j + 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\'', '\u{7f}'), else a lifetime or a label.
            let end = if next == Some('\\') {
                s.get(i + 3..).and_then(|rest| rest.iter().position(|&c| c == '\'')).map(|p| i + 3 + p)
            } else if s.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    blank(&mut out, i + 1, end);
                    i = end + 1;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out
}

/// From `from`, the end of the item that starts there: the index of the `}`
/// closing its first `{`, or of a `;` before any `{` (outside parentheses and
/// brackets); `None` when the text ends first.
fn item_end(code: &[char], from: usize) -> Option<(usize, bool)> {
    let mut depth = 0i64;
    let mut i = from;
    while i < code.len() {
        match code[i] {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ';' if depth == 0 => return Some((i, false)),
            '{' if depth == 0 => {
                let mut braces = 0i64;
                for (j, &c) in code.iter().enumerate().skip(i) {
                    match c {
                        '{' => braces += 1,
                        '}' => {
                            braces -= 1;
                            if braces == 0 {
                                return Some((j, true));
                            }
                        }
                        _ => {}
                    }
                }
                return None;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The char index ranges of the `#[cfg(test)]` items of `code` (from
/// [`code_only`]), from the attribute to the item's end.
fn test_items(code: &[char]) -> Vec<(usize, usize)> {
    let attr: Vec<char> = "#[cfg(test)]".chars().collect();
    (0..code.len())
        .filter(|&i| code[i..].starts_with(&attr))
        .filter_map(|i| item_end(code, i + attr.len()).map(|(end, _)| (i, end)))
        .collect()
}

/// Rule 7: each function of `source` (`path` relative to the root) over the
/// limit, outside test code.
fn check_fn_length(path: &Path, source: &str) -> Vec<String> {
    if is_test_code_path(path) {
        return Vec::new();
    }
    let code = code_only(source);
    let mut line_of = Vec::with_capacity(code.len());
    let mut line = 1;
    for &c in &code {
        line_of.push(line);
        if c == '\n' {
            line += 1;
        }
    }
    let tests = test_items(&code);
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut errors = Vec::new();
    for i in 0..code.len() {
        let is_fn = code[i..].starts_with(&['f', 'n'])
            && (i == 0 || !ident(code[i - 1]))
            && code.get(i + 2).is_some_and(|c| c.is_whitespace());
        if !is_fn || tests.iter().any(|&(a, b)| a <= i && i <= b) {
            continue;
        }
        let name_start = (i + 2..code.len()).find(|&j| !code[j].is_whitespace()).unwrap_or(code.len());
        let name: String = code[name_start..].iter().take_while(|&&c| ident(c)).collect();
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            continue; // `fn(u32) -> u32`, a type
        }
        let Some((end, true)) = item_end(&code, name_start + name.len()) else { continue };
        let lines = line_of[end] - line_of[i] + 1;
        if lines > FN_LIMIT {
            errors.push(format!(
                "{}:{} fn {name} is {lines} lines (limit {FN_LIMIT}); split it into well-named helpers",
                path.display(),
                line_of[i]
            ));
        }
    }
    errors
}

/// The longest README.md and ARCHITECTURE.md may be, in lines.
const FRONT_DOC_LIMIT: usize = 400;

/// Rule 8: a front document (`name`, its `text`) over the limit.
fn check_doc_length(name: &str, text: &str) -> Option<String> {
    let lines = text.lines().count();
    (lines > FRONT_DOC_LIMIT).then(|| {
        format!(
            "{name} is {lines} lines (limit {FRONT_DOC_LIMIT}); move the detail into the guide (docs/) or the crates' \
             file maps (their src/lib.rs headers)"
        )
    })
}

/// A token of Rust code, as rule 9 reads paths: a word (a name or a keyword),
/// `::`, or one other character.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    PathSep,
    Punct(char),
}

/// The tokens of `code` (from [`code_only`]), each with its char index.
fn tokens(code: &[char]) -> Vec<(usize, Tok)> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let c = code[i];
        if ident(c) {
            let end = i + code[i..].iter().take_while(|&&c| ident(c)).count();
            out.push((i, Tok::Word(code[i..end].iter().collect())));
            i = end;
        } else if c == ':' && code.get(i + 1) == Some(&':') {
            out.push((i, Tok::PathSep));
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push((i, Tok::Punct(c)));
            }
            i += 1;
        }
    }
    out
}

fn is_word(t: Option<&(usize, Tok)>, w: &str) -> bool {
    matches!(t, Some((_, Tok::Word(s))) if s == w)
}

/// Reads the use tree starting at token `j` (after `use` or inside braces),
/// under the path `prefix`, pushing every full path it names to `out`
/// with the name it is imported as where `as` renames it (`{self, X}` names
/// the prefix as `…::self`; `*` names the prefix, imported as `*`).
fn use_tree(toks: &[(usize, Tok)], j: &mut usize, prefix: &[String], out: &mut Vec<(Vec<String>, Option<String>)>) {
    let mut path = prefix.to_vec();
    if toks.get(*j).is_some_and(|t| t.1 == Tok::PathSep) {
        path.push("::".into()); // an extern crate's path
        *j += 1;
    }
    loop {
        match toks.get(*j).map(|t| &t.1) {
            Some(Tok::Word(w)) => {
                path.push(w.clone());
                *j += 1;
            }
            Some(Tok::Punct('{')) => {
                *j += 1;
                while toks.get(*j).is_some_and(|t| t.1 != Tok::Punct('}') && t.1 != Tok::Punct(';')) {
                    let before = *j;
                    use_tree(toks, j, &path, out);
                    if toks.get(*j).is_some_and(|t| t.1 == Tok::Punct(',')) || *j == before {
                        *j += 1;
                    }
                }
                *j += 1;
                return;
            }
            Some(Tok::Punct('*')) => {
                *j += 1;
                out.push((path, Some("*".into())));
                return;
            }
            _ => break,
        }
        if toks.get(*j).is_some_and(|t| t.1 == Tok::PathSep) {
            *j += 1;
        } else {
            break;
        }
    }
    let mut alias = None;
    if is_word(toks.get(*j), "as") {
        if let Some((_, Tok::Word(a))) = toks.get(*j + 1) {
            alias = Some(a.clone());
        }
        *j += 2;
    }
    out.push((path, alias));
}

/// The module path of a crate's file, `rel` relative to its `src/`:
/// `lib.rs` (or `main.rs` without a library) is the root, `a.rs` and
/// `a/mod.rs` are `a`, `a/b.rs` is `a::b`. Binaries (`src/bin/`, `main.rs`
/// beside a `lib.rs`) are crates of their own: `None`.
fn module_of(rel: &Path, has_lib: bool) -> Option<Vec<String>> {
    let mut parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let file = parts.pop()?;
    if parts.first().is_some_and(|p| p == "bin") || (parts.is_empty() && file == "main.rs" && has_lib) {
        return None;
    }
    let stem = file.strip_suffix(".rs")?;
    if !(stem == "mod" || (parts.is_empty() && matches!(stem, "lib" | "main"))) {
        parts.push(stem.to_owned());
    }
    Some(parts)
}

/// What rule 9 reads of a file: the paths it names, each with the module it
/// names it from, and the names its module imports (`use`) with their paths.
#[derive(Debug, Default)]
struct Names {
    paths: Vec<(Vec<String>, Vec<String>)>,
    imports: BTreeMap<String, Vec<String>>,
    /// The modules it imports all of (`use a::*`), and the names it defines.
    globs: Vec<Vec<String>>,
    defines: Vec<String>,
}

/// The keywords that open an item with a name.
const ITEM_KEYWORDS: &[&str] = &["struct", "enum", "union", "trait", "type", "fn", "const", "static", "mod"];

/// The paths a file's code names into its own crate, each with the module
/// it is named from (the file's, or an inline `mod x { … }` in it): every
/// path of a `use` item, and every path written inline from `crate::`,
/// `super::` or `self::`. Test items, comments and literals do not count,
/// nor macro calls (`crate::m!`), `$crate::` paths or `pub(in crate::a)`.
fn named_paths(module: &[String], source: &str) -> Names {
    let mut code = code_only(source);
    for (a, b) in test_items(&code) {
        for c in &mut code[a..=b] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    }
    let toks = tokens(&code);
    // Inline modules: (first char, last char, name).
    let mut inline = Vec::new();
    for w in toks.windows(3) {
        if let [(_, Tok::Word(m)), (_, Tok::Word(name)), (open, Tok::Punct('{'))] = w
            && m == "mod"
            && let Some((end, true)) = item_end(&code, *open)
        {
            inline.push((*open, end, name.clone()));
        }
    }
    let module_at = |pos: usize| {
        let mut m = module.to_vec();
        m.extend(inline.iter().filter(|(a, b, _)| *a <= pos && pos <= *b).map(|(_, _, n)| n.clone()));
        m
    };
    let mut out = Names::default();
    let mut i = 0;
    while i < toks.len() {
        let (pos, tok) = &toks[i];
        if is_word(Some(&toks[i]), "use") {
            let mut j = i + 1;
            let mut paths = Vec::new();
            use_tree(&toks, &mut j, &[], &mut paths);
            let here = module_at(*pos);
            for (path, alias) in paths {
                let name = alias.or_else(|| path.last().filter(|l| *l != "self").cloned());
                match name.filter(|_| here == module) {
                    Some(glob) if glob == "*" => out.globs.push(path.clone()),
                    Some(name) => {
                        out.imports.insert(name, path.clone());
                    }
                    None => {}
                }
                out.paths.push((here.clone(), path));
            }
            i = j.max(i + 1);
            continue;
        }
        if let (Tok::Word(k), Some((_, Tok::Word(name)))) = (tok, toks.get(i + 1))
            && ITEM_KEYWORDS.contains(&k.as_str())
        {
            out.defines.push(name.clone());
        }
        let starts_path = matches!(tok, Tok::Word(w) if matches!(w.as_str(), "crate" | "super" | "self"))
            && toks.get(i + 1).is_some_and(|t| t.1 == Tok::PathSep)
            && !(i > 0 && matches!(toks[i - 1].1, Tok::PathSep | Tok::Punct('$')))
            && !is_word(i.checked_sub(1).and_then(|p| toks.get(p)), "in");
        if !starts_path {
            i += 1;
            continue;
        }
        let mut path = Vec::new();
        let mut j = i;
        while let Some((_, Tok::Word(w))) = toks.get(j) {
            path.push(w.clone());
            if toks.get(j + 1).is_some_and(|t| t.1 == Tok::PathSep) {
                j += 2;
            } else {
                j += 1;
                break;
            }
        }
        if !toks.get(j).is_some_and(|t| t.1 == Tok::Punct('!')) {
            out.paths.push((module_at(*pos), path));
        }
        i = j.max(i + 1);
    }
    out
}

/// `path`, named from module `here`, as a path from the crate root; `None`
/// when it leaves the crate (an extern crate's path, or a name that is no
/// module of this crate's files heading a `use` path).
fn absolute(here: &[String], path: &[String], modules: &BTreeMap<Vec<String>, usize>) -> Option<Vec<String>> {
    let (first, rest) = path.split_first()?;
    let mut abs = match first.as_str() {
        "crate" => Vec::new(),
        "self" => here.to_vec(),
        "super" => here[..here.len().checked_sub(1)?].to_vec(),
        "::" => return None,
        name => {
            let mut child = here.to_vec();
            child.push(name.to_owned());
            modules.contains_key(&child).then_some(child)?
        }
    };
    for seg in rest {
        match seg.as_str() {
            "super" => {
                abs.pop()?;
            }
            "self" => {}
            name => abs.push(name.to_owned()),
        }
    }
    Some(abs)
}

/// Where `path`, named from module `here`, leads: its path from the root,
/// the length of its longest prefix that is a file's module, and that file.
/// A name the file imports (a re-export, `pub use a::X`, or a private `use`)
/// is followed to where it comes from: `crate::X` re-exported by `lib.rs`
/// from `a.rs` leads to `a.rs`; `None` when it leads out of the crate.
fn locate(
    here: &[String],
    path: &[String],
    modules: &BTreeMap<Vec<String>, usize>,
    names: &[Names],
) -> Option<(Vec<String>, usize, usize)> {
    let mut abs = absolute(here, path, modules)?;
    for _ in 0..16 {
        let (k, &file) = (0..=abs.len()).rev().find_map(|k| modules.get(&abs[..k]).map(|f| (k, f)))?;
        let Some(name) = abs.get(k) else { return Some((abs, k, file)) };
        let own = &names[file];
        let mut next = if let Some(import) = own.imports.get(name) {
            absolute(&abs[..k], import, modules)?
        } else {
            // A name it neither imports nor defines comes through a glob, if from
            // a module of this crate that has it.
            let from_glob = (!own.defines.contains(name)).then(|| {
                own.globs.iter().filter_map(|g| absolute(&abs[..k], g, modules)).find(|g| {
                    modules
                        .get(g)
                        .is_some_and(|&m| names[m].defines.contains(name) || names[m].imports.contains_key(name))
                })
            });
            let Some(Some(mut glob)) = from_glob else { return Some((abs, k, file)) };
            glob.push(name.clone());
            glob
        };
        next.extend_from_slice(&abs[k + 1..]);
        abs = next;
    }
    None
}

/// Rule 9: the circles of imports between the files of crate `krate`;
/// `src` is its `src/` folder and `files` its files (paths relative to the
/// root, with their text). A file depends on another when its code names a
/// path into that file's module (the longest module prefix that is a file):
/// `use crate::a::X`, `super::X`, `self::a::X`, a `use a::X` of a child
/// module, `crate::a::X` inline. A `mod a;` declaration is no import.
fn check_circles(krate: &str, src: &Path, files: &[(PathBuf, String)]) -> Vec<String> {
    let has_lib = files.iter().any(|(p, _)| p == &src.join("lib.rs"));
    let mut files: Vec<(&PathBuf, &String, Vec<String>)> =
        files.iter().filter_map(|(p, s)| module_of(p.strip_prefix(src).ok()?, has_lib).map(|m| (p, s, m))).collect();
    files.sort_by(|a, b| a.0.cmp(b.0));
    let modules: BTreeMap<Vec<String>, usize> = files.iter().enumerate().map(|(n, f)| (f.2.clone(), n)).collect();
    let names: Vec<Names> = files.iter().map(|(_, source, module)| named_paths(module, source)).collect();
    // (from, to) → the names `from` uses of `to`.
    let mut edges: BTreeMap<(usize, usize), Vec<String>> = BTreeMap::new();
    for (from, file) in names.iter().enumerate() {
        for (here, path) in &file.paths {
            let Some((abs, k, to)) = locate(here, path, &modules, &names) else { continue };
            if to == from {
                continue;
            }
            let named = &abs[..(k + 1).min(abs.len())];
            let name = if k == 0 { format!("crate::{}", named.join("::")) } else { named.join("::") };
            let names = edges.entry((from, to)).or_default();
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    let n = files.len();
    let mut next = vec![Vec::new(); n];
    for &(a, b) in edges.keys() {
        next[a].push(b);
    }
    let reach: Vec<Vec<bool>> = (0..n)
        .map(|s| {
            let mut seen = vec![false; n];
            let mut stack = vec![s];
            while let Some(v) = stack.pop() {
                for &w in &next[v] {
                    if !seen[w] {
                        seen[w] = true;
                        stack.push(w);
                    }
                }
            }
            seen
        })
        .collect();
    let name = |v: usize| files[v].0.display().to_string();
    let mut errors = Vec::new();
    for (s, from_s) in reach.iter().enumerate() {
        let circle: Vec<usize> = (0..n).filter(|&v| from_s[v] && reach[v][s]).collect();
        if circle.len() < 2 || circle[0] != s {
            continue; // no circle, or one reported from its first file
        }
        // The shortest way round from `s`, breadth first.
        let mut parent = vec![usize::MAX; n];
        let mut queue = std::collections::VecDeque::from([s]);
        let mut last = s;
        'search: while let Some(v) = queue.pop_front() {
            for &w in &next[v] {
                if w == s {
                    last = v;
                    break 'search;
                }
                if circle.contains(&w) && parent[w] == usize::MAX {
                    parent[w] = v;
                    queue.push_back(w);
                }
            }
        }
        let mut way = vec![s];
        let mut v = last;
        while v != s {
            way.insert(1, v);
            v = parent[v];
        }
        way.push(s);
        let chain: Vec<String> = way.iter().map(|&v| name(v)).collect();
        let uses: Vec<String> =
            way.windows(2).map(|w| format!("{} uses {}", name(w[0]), edges[&(w[0], w[1])].join(", "))).collect();
        let others: Vec<String> = circle.iter().filter(|v| !way.contains(v)).map(|&v| name(v)).collect();
        let others = if others.is_empty() { String::new() } else { format!("; in it too: {}", others.join(", ")) };
        errors.push(format!(
            "crate {krate}: files import each other in a circle: {} ({}){others}; move what they share into a module \
             both import, so that imports point one way",
            chain.join(" → "),
            uses.join("; ")
        ));
    }
    errors
}

/// Files that hold paths outside the repository as data to check, not to read:
/// the tests of the rules that judge such paths.
const OUTSIDE_PATHS_AS_DATA: &[&str] = &["tests/tests/tidy.rs", "tests/tests/docs.rs"];

/// Rule 10 over one source (`path` relative to the root): every string
/// literal that is a path whose `../` steps climb above the repository's root,
/// read from the file's crate (the part of `path` before its `src/`, `tests/`,
/// `benches/` or `examples/`) or, inside `include_bytes!`/`include_str!`, from
/// the file's own folder.
fn check_inside_repository(path: &Path, source: &str) -> Vec<String> {
    if OUTSIDE_PATHS_AS_DATA.iter().any(|p| path == Path::new(p)) {
        return Vec::new();
    }
    let parts: Vec<String> = path.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let folders = parts.len().saturating_sub(1);
    let crate_depth = parts
        .iter()
        .skip(1)
        .position(|c| ["src", "tests", "benches", "examples"].contains(&c.as_str()))
        .map_or(folders, |i| i + 1);
    let mut errors = Vec::new();
    for (n, line) in source.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let pieces: Vec<&str> = code.split('"').collect();
        for (i, literal) in pieces.iter().enumerate().skip(1).step_by(2) {
            let steps: Vec<&str> = literal.split('/').collect();
            let ups = steps.iter().take_while(|c| **c == "..").count();
            let rest = steps[ups..].iter().any(|c| !c.is_empty());
            let included = pieces[i - 1].trim_end().ends_with("include_bytes!(")
                || pieces[i - 1].trim_end().ends_with("include_str!(");
            let depth = if included { folders } else { crate_depth };
            if rest && !literal.contains(' ') && ups > depth {
                errors.push(format!(
                    "{}:{}: \"{literal}\" reaches outside the repository; put what the test reads under tests/data/",
                    path.display(),
                    n + 1
                ));
            }
        }
    }
    errors
}

/// Every file and folder of the repository (relative), but `target/` and `.git/`.
fn repo_tree(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        if name == "target" || name == ".git" {
            continue;
        }
        out.push(p.strip_prefix(root).unwrap().to_path_buf());
        if p.is_dir() {
            repo_tree(root, &p, out);
        }
    }
}

#[test]
fn the_tree_is_tidy() {
    let root = workspace_root();
    let krates = workspace_crates(&root);
    assert!(krates.len() >= 10, "cargo metadata found {} crates", krates.len());
    let mut errors = check_direction(&krates);
    errors.extend(check_native(&krates));
    errors.extend(check_random_deps(&krates));
    // Longest folder first, so a file belongs to the innermost crate.
    let mut by_dir: Vec<&Krate> = krates.iter().collect();
    by_dir.sort_by_key(|k| std::cmp::Reverse(k.dir.as_os_str().len()));
    let mut tree = Vec::new();
    repo_tree(&root, &root, &mut tree);
    let mut files = 0;
    let mut circles = Vec::new();
    for k in &krates {
        let mut paths = Vec::new();
        rust_files(&root.join(&k.dir), &mut paths);
        let mut own = Vec::new();
        let mut src = Vec::new();
        for p in paths {
            let rel = p.strip_prefix(&root).unwrap().to_path_buf();
            let owner = by_dir.iter().find(|o| rel.starts_with(&o.dir)).map(|o| o.name.as_str());
            if owner != Some(k.name.as_str()) {
                continue; // a nested crate's file, checked with that crate
            }
            let source = std::fs::read_to_string(&p).unwrap();
            files += 1;
            errors.extend(check_writes(&k.name, &rel, &source));
            errors.extend(check_header(&rel, &source));
            errors.extend(check_generator_copy(&rel, &source));
            errors.extend(check_fn_length(&rel, &source));
            errors.extend(check_inside_repository(&rel, &source));
            if rel.starts_with(k.dir.join("src")) {
                src.push((rel.clone(), source));
            }
            own.push(rel);
        }
        circles.extend(check_circles(&k.name, &k.dir.join("src"), &src));
        // The crate's map names its files under src/, tests/, benches/ and examples/.
        own.retain(|p| ["src", "tests", "benches", "examples"].iter().any(|d| p.starts_with(k.dir.join(d))));
        own.sort();
        let map = map_file(&k.dir, &tree);
        match std::fs::read_to_string(root.join(&map)) {
            Ok(source) => errors.extend(check_crate_map(&k.dir, &map, &source, &tree, &own)),
            Err(e) => errors.push(format!("{}: {e}; a crate's map opens its src/lib.rs or src/main.rs", map.display())),
        }
    }
    errors.extend(circles);
    assert!(files > 100, "only {files} Rust files found");
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md at the root");
    errors.extend(check_architecture(&architecture, &tree));
    errors.extend(check_doc_length("ARCHITECTURE.md", &architecture));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md at the root");
    errors.extend(check_doc_length("README.md", &readme));
    assert!(errors.is_empty(), "the tree breaks {} rule(s):\n{}", errors.len(), errors.join("\n"));
}

fn krate(name: &str, deps: &[(&str, &str)]) -> Krate {
    Krate {
        name: name.into(),
        dir: PathBuf::from(name),
        deps: deps.iter().map(|(d, k)| ((*d).into(), (*k).into())).collect(),
    }
}

#[test]
fn a_dependency_against_the_direction_is_reported() {
    let good = [krate("vramlab-engine", &[("vramlab-allocator", "normal"), ("cudarc", "normal")])];
    assert!(check_direction(&good).is_empty());
    let backwards = [krate("vramlab-allocator", &[("vramlab-engine", "normal")])];
    let e = check_direction(&backwards);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("vramlab-allocator") && e[0].contains("dependency on vramlab-engine"), "{}", e[0]);
    // Same layer counts as against the direction: the model and the kernels are independent.
    let generator = [krate("vramlab-allocator", &[("vramlab-rng", "normal")])];
    let e = check_direction(&generator);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("uses no other vramlab crate"), "{}", e[0]);
    assert!(check_direction(&[krate("vramlab-allocator", &[("vramlab-rng", "dev")])]).is_empty());
    let sideways = [krate("vramlab-cpu-kernels", &[("vramlab-allocator", "dev")])];
    assert_eq!(check_direction(&sideways).len(), 1);
    let dev_backwards = [krate("vramlab-profiler", &[("vramlab-suites", "dev")])];
    assert!(check_direction(&dev_backwards)[0].contains("dev dependency on vramlab-suites"));
    let unknown = [krate("vramlab-new", &[])];
    assert!(check_direction(&unknown)[0].contains("does not know"));
}

#[test]
fn native_bindings_outside_their_crate_are_reported() {
    let ok =
        [krate("vramlab-engine", &[("cudarc", "normal")]), krate("vramlab-profiler", &[("nvml-wrapper", "normal")])];
    assert!(check_native(&ok).is_empty());
    let e = check_native(&[krate("vramlab-suites", &[("cudarc", "normal"), ("nvml-wrapper", "dev")])]);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].contains("vramlab-suites") && e[0].contains("cudarc") && e[0].contains("only vramlab-engine"));
    assert!(e[1].contains("dev dependency on nvml-wrapper") && e[1].contains("only vramlab-profiler"));
}

#[test]
fn a_file_write_outside_reports_is_reported_with_its_line() {
    let src = "//! A suite.\nfn run() {\n    let x = 1;\n    std::fs::write(\"out.json\", b\"{}\").unwrap();\n}\n";
    let path = Path::new("bench-suites/src/suites/memory.rs");
    let e = check_writes("vramlab-suites", path, src);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("bench-suites/src/suites/memory.rs:4:") && e[0].contains("fs::write"), "{}", e[0]);
    for (call, line) in [("File::create(p)", 2), ("OpenOptions::new()", 2), ("std::fs::rename(a, b)", 2)] {
        let src = format!("//! x\n{call};\n");
        let e = check_writes("vramlab-engine", Path::new("engine/runtime/src/autotune.rs"), &src);
        assert!(e.len() == 1 && e[0].contains(&format!(":{line}:")), "{call}: {e:?}");
    }
    // Allowed: the reports crate, the bundle builder, test code and comments.
    assert!(check_writes("vramlab-reports", Path::new("reports/src/lib.rs"), src).is_empty());
    assert!(check_writes("xtask", Path::new("xtask/src/gpu_check.rs"), src).is_empty());
    assert!(!check_writes("xtask", Path::new("xtask/src/bench_cmd.rs"), src).is_empty());
    assert!(check_writes("vramlab-suites", Path::new("bench-suites/tests/e2e.rs"), src).is_empty());
    let in_tests =
        "//! x\nfn f() {}\n#[cfg(test)]\nmod tests {\n    fn g() { std::fs::write(\"a\", b\"\").unwrap(); }\n}\n";
    assert!(check_writes("vramlab-engine", Path::new("engine/runtime/src/x.rs"), in_tests).is_empty());
    let commented = "//! x\n// std::fs::write is not called here\n";
    assert!(check_writes("vramlab-engine", Path::new("engine/runtime/src/x.rs"), commented).is_empty());
}

#[test]
fn a_file_without_a_header_is_reported() {
    assert!(check_header(Path::new("a.rs"), "//! What it holds.\nfn f() {}\n").is_none());
    assert!(check_header(Path::new("a.rs"), "\n\n//! After blank lines.\n").is_none());
    let e = check_header(Path::new("engine/runtime/src/x.rs"), "use std::fs;\n//! too late\n").unwrap();
    assert!(e.contains("engine/runtime/src/x.rs") && e.contains("no `//!` header"), "{e}");
    assert!(check_header(Path::new("a.rs"), "/// An item doc, not a header.\nfn f() {}\n").is_some());
    assert!(check_header(Path::new("a.rs"), "").is_some());
}

#[test]
fn a_second_generator_is_reported() {
    let e = check_random_deps(&[krate("vramlab-reports", &[("rand_chacha", "normal"), ("proptest", "dev")])]);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("vramlab-reports") && e[0].contains("rand_chacha") && e[0].contains("vramlab_rng"));
    let copy = "//! x\nfn next(s: &mut u64) -> u64 {\n    *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);\n    *s\n}\n";
    let e = check_generator_copy(Path::new("engine/runtime/src/tensor/mod.rs"), copy);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("engine/runtime/src/tensor/mod.rs:3:"), "{}", e[0]);
    let xorshift = "//! x\nconst M: u64 = 0x2545F4914F6CDD1D;\n";
    assert_eq!(check_generator_copy(Path::new("profiler/tests/common/mod.rs"), xorshift).len(), 1);
    assert!(check_generator_copy(Path::new("engine/rng/src/lib.rs"), copy).is_empty());
}

/// The rule lists name real things: every layer crate and writer file exists.
#[test]
fn the_rules_name_crates_and_files_that_exist() {
    let root = workspace_root();
    let krates = workspace_crates(&root);
    let names: BTreeMap<&str, &Krate> = krates.iter().map(|k| (k.name.as_str(), k)).collect();
    for name in LAYERS.iter().flat_map(|l| l.iter()) {
        assert!(names.contains_key(name), "LAYERS names {name}, which is not a workspace crate");
    }
    for (_, owner) in NATIVE {
        assert!(names.contains_key(owner), "{owner}");
    }
    for f in WRITER_FILES {
        assert!(root.join(f).is_file(), "{f}");
    }
}

#[test]
fn a_wrong_or_missing_name_in_a_map_is_reported() {
    let tree: Vec<PathBuf> =
        ["engine", "engine/a", "engine/a/src", "engine/a/src/lib.rs", "engine/a/src/cuda", "engine/a/src/cuda/conv"]
            .iter()
            .chain(&[
                "engine/a/src/cuda/conv/mod.rs",
                "engine/a/src/cuda/libs.rs",
                "engine/a/tests",
                "engine/a/tests/t.rs",
            ])
            .map(PathBuf::from)
            .collect();
    let sources: Vec<PathBuf> =
        ["engine/a/src/lib.rs", "engine/a/src/cuda/conv/mod.rs", "engine/a/src/cuda/libs.rs", "engine/a/tests/t.rs"]
            .iter()
            .map(PathBuf::from)
            .collect();
    let good = "## Code map\n\n#### `engine/a/` (a)\n\n- `lib.rs` — the map.\n- `cuda/` — the backend:\n  `libs.rs` finds libraries; `conv/` is conv2d.\n\nTests: `tests/t.rs`.\n";
    assert_eq!(check_architecture(good, &tree), Vec::<String>::new());
    // A file that became a folder; a file left out is no longer ARCHITECTURE.md's
    // concern (the crate's own map names every file).
    let stale = good.replace("`conv/` is conv2d", "`cuda/conv.rs` is conv2d").replace("Tests: `tests/t.rs`.", "");
    let e = check_architecture(&stale, &tree);
    assert!(e.len() == 1 && e[0].starts_with("ARCHITECTURE.md:7: `cuda/conv.rs` names nothing"), "{e:?}");
    // Code blocks and placeholders are not names.
    let more = format!("{good}\n```\n`nothing/here.rs`\n```\n`NAME.stats.json` and `<suite>.csv`\n");
    assert_eq!(check_architecture(&more, &tree), Vec::<String>::new());
    // The crate's own map, in its lib.rs header: every name exists, every file is named.
    let dir = Path::new("engine/a");
    let map = Path::new("engine/a/src/lib.rs");
    let header = "//! The crate a.\n//!\n//! - `src/lib.rs` — this map.\n//! - `cuda/` — the backend (`cuda/libs.rs` finds\n//!   libraries, `cuda/conv/mod.rs` is conv2d).\n//! - `tests/t.rs` — a test; \
                  `src/gone.rs` is not, `<suite>.csv` and `README.md` are not paths, `shared/spec.md` is beside,\n//!   and `../a/src/lib.rs` is.\n\n//! `nothing.rs`: after the header\nfn f() {}\n";
    let e = check_crate_map(dir, map, header, &tree, &sources);
    assert!(e.len() == 1 && e[0].starts_with("engine/a/src/lib.rs:6: `src/gone.rs` names nothing"), "{e:?}");
    let header = header.replace("`src/gone.rs` is not, ", "");
    assert_eq!(check_crate_map(dir, map, &header, &tree, &sources), Vec::<String>::new());
    // A list item that names a folder first: its later names may be read in it,
    // on its continuation lines too, and not after the item ends.
    let nested = header.replace(
        "(`cuda/libs.rs` finds\n//!   libraries, `cuda/conv/mod.rs` is conv2d)",
        "(`libs.rs` finds\n//!   libraries, `conv/mod.rs` is conv2d)",
    );
    assert_eq!(check_crate_map(dir, map, &nested, &tree, &sources), Vec::<String>::new());
    let outside = nested.replace("//! - `tests/t.rs` — a test;", "//! - `tests/t.rs` — a test, not `libs.rs`;");
    let e = check_crate_map(dir, map, &outside, &tree, &sources);
    assert!(e.len() == 1 && e[0].starts_with("engine/a/src/lib.rs:6: `libs.rs` names nothing"), "{e:?}");
    // A stale name, a file left out, a folder's files left out with it.
    let stale = header.replace("`tests/t.rs`", "`tests/u.rs`").replace(
        "//! - `cuda/` — the backend (`cuda/libs.rs` finds\n//!   libraries, `cuda/conv/mod.rs` is conv2d).\n",
        "//! - `cuda/libs.rs` finds libraries.\n",
    );
    let e = check_crate_map(dir, map, &stale, &tree, &sources);
    assert_eq!(
        e,
        [
            "engine/a/src/lib.rs:5: `tests/u.rs` names nothing in the tree (read relative to engine/a/ and engine/a/src/); fix the name or the text",
            "engine/a/src/cuda/conv/mod.rs: not named in engine/a/src/lib.rs's file map (its `//!` header), nor a folder holding it; say what it holds there",
            "engine/a/tests/t.rs: not named in engine/a/src/lib.rs's file map (its `//!` header), nor a folder holding it; say what it holds there",
        ]
    );
    assert_eq!(map_file(dir, &tree), map);
    assert_eq!(map_file(Path::new("engine/b"), &tree), Path::new("engine/b/src/main.rs"));
}

#[test]
fn a_long_function_is_reported_and_braces_in_literals_do_not_count() {
    let body = |n: usize| "    let x = 1;\n".repeat(n);
    // 1 `fn` line + 149 body lines + the closing brace = 151.
    let long = format!("//! x\n\nfn too_long() {{\n{}}}\n", body(149));
    let e = check_fn_length(Path::new("engine/runtime/src/x.rs"), &long);
    assert_eq!(e, ["engine/runtime/src/x.rs:3 fn too_long is 151 lines (limit 150); split it into well-named helpers"]);
    let fits = format!("//! x\npub(crate) fn just_fits<'a>(s: &'a str) -> &'a str {{\n{}    s\n}}\n", body(147));
    assert_eq!(check_fn_length(Path::new("a/src/x.rs"), &fits), Vec::<String>::new());
    // Braces in strings, raw strings, characters and comments, and lifetimes, fool nothing:
    // the function below is 6 lines, then `after` is long.
    let tricky = r##"//! x
fn tricky<'a>(s: &'a str) -> &'a str {
    let a = "}\"}"; let b = r#"}"{"#; let c = '}';
    let d = '\''; let e = b"{"; let l = 'label: loop { break 'label; }; // } }
    /* } /* { */ } */ let f = br"}"; let g = b'{';
    let h = '\u{7d}'; let r#type = 1; let rr = r"\"; let i = "{";
    s
}
fn after() {
"##;
    let tricky = format!("{tricky}{}}}\n", body(150));
    let e = check_fn_length(Path::new("a/src/x.rs"), &tricky);
    assert!(e.len() == 1 && e[0].starts_with("a/src/x.rs:9 fn after is 152 lines"), "{e:?}");
    // Test code, declarations without a body and fn types are not counted.
    let in_tests = format!("//! x\n#[cfg(test)]\nmod tests {{\n    fn long() {{\n{}    }}\n}}\n", body(200));
    assert!(check_fn_length(Path::new("a/src/x.rs"), &in_tests).is_empty());
    let decl = "//! x\ntrait T {\n    fn f(&self) -> u32;\n}\ntype F = fn(u32) -> u32;\n";
    assert!(check_fn_length(Path::new("a/src/x.rs"), decl).is_empty());
    for dir in ["a/tests/t.rs", "a/benches/b.rs", "a/examples/e.rs", "fuzz/fuzz_targets/f.rs"] {
        assert!(check_fn_length(Path::new(dir), &long).is_empty(), "{dir}");
    }
}

#[test]
fn a_long_front_document_is_reported() {
    assert_eq!(check_doc_length("README.md", &"line\n".repeat(400)), None);
    let e = check_doc_length("ARCHITECTURE.md", &"line\n".repeat(401)).unwrap();
    assert!(e.starts_with("ARCHITECTURE.md is 401 lines (limit 400)"), "{e}");
}

#[test]
fn files_that_import_each_other_are_reported() {
    let src = Path::new("k/src");
    let file = |p: &str, s: &str| (src.join(p), format!("//! {p}\n{s}"));
    let files = [
        file("lib.rs", "mod a;\nmod b;\nmod m;\nmod n;\nmod p;\nmod s;\nmacro_rules! m { () => { $crate::a::Y } }\n"),
        // Two files through `crate::` paths, in a use tree and inline; strings,
        // comments and test items name nothing.
        file("a.rs", "use crate::{b::{X, Z as Zed}, s};\npub struct Y;\n"),
        file(
            "b.rs",
            "pub struct X;\npub struct Z;\npub fn f() -> crate::a::Y { let _ = \"crate::p::q::Q\"; crate::a::Y }\n\
             // crate::s::S\n#[cfg(test)]\nmod tests {\n    use crate::n::Foo;\n}\n",
        ),
        // Three through `super::`: p/q.rs → p/r.rs → s.rs → p/q.rs.
        file("p/mod.rs", "mod q;\nmod r;\n"),
        file("p/q.rs", "use super::r::R;\npub struct Q(R);\n"),
        file("p/r.rs", "use super::super::s::S;\npub struct R(S);\n"),
        file("s.rs", "pub struct S;\npub fn g(_: crate::p::q::Q) {}\n"),
        // A parent re-exporting its child, which uses the parent.
        file("m/mod.rs", "mod child;\npub use child::Bar;\npub struct Foo;\n"),
        file("m/child.rs", "use super::Foo;\npub struct Bar(Foo);\n"),
        // No circle: the parent only declares its child; the child's use of a
        // name the parent re-exports leads past the parent.
        file("n/mod.rs", "mod kid;\nmod leaf;\npub use leaf::Leaf;\npub struct Foo;\nfn h() { let _ = self::Foo; }\n"),
        file("n/kid.rs", "use super::{Foo, Leaf};\nuse crate::n::leaf;\n"),
        file("n/leaf.rs", "pub struct Leaf;\n"),
    ];
    assert_eq!(
        check_circles("k", src, &files),
        [
            "crate k: files import each other in a circle: k/src/a.rs → k/src/b.rs → k/src/a.rs (k/src/a.rs uses \
             b::X, b::Z; k/src/b.rs uses a::Y); move what they share into a module both import, so that imports \
             point one way",
            "crate k: files import each other in a circle: k/src/m/child.rs → k/src/m/mod.rs → k/src/m/child.rs \
             (k/src/m/child.rs uses m::Foo; k/src/m/mod.rs uses m::child::Bar); move what they share into a module \
             both import, so that imports point one way",
            "crate k: files import each other in a circle: k/src/p/q.rs → k/src/p/r.rs → k/src/s.rs → k/src/p/q.rs \
             (k/src/p/q.rs uses p::r::R; k/src/p/r.rs uses s::S; k/src/s.rs uses p::q::Q); move what they share \
             into a module both import, so that imports point one way",
        ]
    );
    // Each file alone, or the files of one way, have no circle.
    let one_way: Vec<_> =
        files.iter().filter(|(p, _)| p.starts_with("k/src/n") || p.ends_with("lib.rs")).cloned().collect();
    assert!(check_circles("k", src, &one_way).is_empty());
}

#[test]
fn a_path_outside_the_repository_is_reported() {
    let src = "//! x\nfn f() {\n    let d = dir.join(\"../../shared/fixtures\"); // \"../../../x\"\n    let t = dir.join(\"../tests/data\");\n}\n";
    let e = check_inside_repository(Path::new("snapshot/tests/a.rs"), src);
    assert_eq!(
        e,
        [
            "snapshot/tests/a.rs:3: \"../../shared/fixtures\" reaches outside the repository; put what the test reads under tests/data/"
        ]
    );
    // Two levels down, two steps up stay inside; the root's own files have no step to spare.
    assert!(check_inside_repository(Path::new("engine/a/tests/a.rs"), src).is_empty());
    assert_eq!(check_inside_repository(Path::new("build.rs"), "//! x\nconst P: &str = \"../x\";\n").len(), 1);
    // An included file is read from the including file's folder.
    let include = "//! x\nconst B: &[u8] = include_bytes!(\"../../../tests/data/a.pickle\");\n";
    assert!(check_inside_repository(Path::new("snapshot/src/analysis/diff.rs"), include).is_empty());
    assert_eq!(check_inside_repository(Path::new("snapshot/src/diff.rs"), include).len(), 1);
}
