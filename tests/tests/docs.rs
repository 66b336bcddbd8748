//! The docs test: README.md and the guide (`docs/`, an mdBook) say only true
//! things about the tree and the command line.
//!
//! 1. **Links.** Every relative link and image in README.md and
//!    `docs/src/*.md` points to a file or folder that exists, and a link with
//!    an `#anchor` into a Markdown file to one of its headings (GitHub's and
//!    mdBook's slug: lower case, letters, digits, `-` and `_` kept, spaces as
//!    `-`, the rest dropped; a repeated heading gets `-1`, `-2`, …).
//! 2. **The book.** `docs/book.toml` exists; every chapter `docs/src/SUMMARY.md`
//!    lists exists, and every `docs/src/*.md` is listed there.
//! 3. **Code blocks.** Every fenced block names its language, so no command
//!    hides in an unchecked one.
//! 4. **Commands.** Every `vramlab …` and `cargo xtask …` command line in a
//!    `sh`, `bash`, `shell` or `console` block is accepted by the command line
//!    (`xtask::check_args`, clap without running anything). In a `console`
//!    block only `$ ` lines are commands (the rest is output); in the others
//!    every line is, a leading `$ ` stripped. Comment lines are skipped, lines
//!    ending in `\` joined, the words split as a shell splits them (quotes
//!    kept together), and the command ends at `|`, `>`, `<`, `;`, `&` or a
//!    `#` comment. Values are taken as written: a path placeholder (`FILE`,
//!    `DIR`) is a path to clap; a usage synopsis (`[--out DIR]`) belongs in
//!    a `text` block, which is not checked.
//!
//! Each rule is a function over in-memory inputs, so a unit test can plant a
//! violation and see it reported; `the_docs_are_true` runs them over the tree.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use vramlab_tests::workspace_root;

/// Languages of the code blocks whose command lines are checked.
const COMMAND_LANGS: &[&str] = &["sh", "bash", "shell", "console"];

/// The Markdown files checked, relative to the root: README.md and the book's chapters.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md")];
    let src = root.join("docs/src");
    let entries = std::fs::read_dir(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let mut chapters: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| p.strip_prefix(root).unwrap().to_path_buf())
        .collect();
    chapters.sort();
    files.extend(chapters);
    files
}

/// `path` with `.` and `..` resolved lexically; `None` when it climbs above the root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// The lines of `text` outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        match fence {
            Some(f) if t.starts_with(f) && t[f.len()..].trim().is_empty() => fence = None,
            Some(_) => {}
            None if t.starts_with("```") || t.starts_with("~~~") => {
                let marker = &t[..t.len() - t.trim_start_matches(['`', '~']).len()];
                fence = Some(marker);
            }
            None => out.push((i + 1, line)),
        }
    }
    out
}

/// `line` with the insides of inline code spans blanked out (a `](` there is not a link).
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(c);
        } else {
            out.push(if in_code { ' ' } else { c });
        }
    }
    out
}

/// The targets of the inline links and images (`[t](target)`, `![a](target)`)
/// and link definitions (`[t]: target`) of `text`, with their line numbers.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            out.push((n, target.to_owned()));
            rest = &after[end..];
        }
        let t = line.trim_start();
        if t.starts_with('[')
            && let Some(close) = t.find("]:")
            && !t[..close].contains('(')
        {
            let target = t[close + 2..].split_whitespace().next().unwrap_or("");
            out.push((n, target.to_owned()));
        }
    }
    out
}

/// A heading's anchor as GitHub and mdBook make it.
fn slug(heading: &str) -> String {
    // A link in a heading reads as its text.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else { break };
        let Some(close) = rest[open + mid..].find(')') else { break };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    text.push_str(rest);
    text.trim()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_lowercase().next().unwrap_or(c)),
            ' ' => Some('-'),
            _ => None,
        })
        .collect()
}

/// The anchors of the headings of a Markdown text, repeated ones numbered.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.len() - line.trim_start_matches('#').len();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
        *n += 1;
    }
    out
}

/// The repository as the link rule sees it: which paths exist, and the text of
/// Markdown files an anchor may point into.
trait Tree {
    fn exists(&self, path: &Path) -> bool;
    fn markdown(&self, path: &Path) -> Option<String>;
}

/// The real tree under a root.
struct Disk(PathBuf);

impl Tree for Disk {
    fn exists(&self, path: &Path) -> bool {
        self.0.join(path).exists()
    }
    fn markdown(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(self.0.join(path)).ok()
    }
}

/// Rule 1 over one document (`path` relative to the root): each broken link as
/// `path:line: message`. Returns the errors and the number of links checked.
fn check_links(path: &Path, text: &str, tree: &dyn Tree) -> (Vec<String>, usize) {
    let mut errors = Vec::new();
    let mut checked = 0;
    let dir = path.parent().unwrap_or(Path::new(""));
    for (n, target) in link_targets(text) {
        let external = target.contains("://") || target.starts_with("mailto:");
        if external || target.is_empty() {
            continue;
        }
        checked += 1;
        let (file, anchor) = match target.split_once('#') {
            Some((f, a)) => (f, Some(a)),
            None => (target.as_str(), None),
        };
        // `#anchor` alone points into this document.
        let resolved = if file.is_empty() { Some(path.to_path_buf()) } else { normalize(&dir.join(file)) };
        let Some(resolved) = resolved.filter(|p| file.is_empty() || tree.exists(p)) else {
            errors.push(format!("{}:{n}: the link `{target}` points to nothing: no file {file}", path.display()));
            continue;
        };
        let Some(anchor) = anchor.filter(|_| resolved.extension().is_some_and(|x| x == "md")) else { continue };
        let found = if file.is_empty() { Some(text.to_owned()) } else { tree.markdown(&resolved) };
        if !found.is_some_and(|t| anchors(&t).contains(anchor)) {
            errors.push(format!(
                "{}:{n}: the link `{target}` points to no heading: {} has none whose anchor is #{anchor}",
                path.display(),
                resolved.display()
            ));
        }
    }
    (errors, checked)
}

/// Rule 2: the chapters SUMMARY.md lists (paths relative to `docs/src`) against
/// the chapter files there (`chapters`, file names).
fn check_summary(summary: &str, chapters: &[String]) -> Vec<String> {
    let mut errors = Vec::new();
    let listed: Vec<(usize, String)> = link_targets(summary).into_iter().filter(|(_, t)| !t.contains("://")).collect();
    for (n, target) in &listed {
        if !chapters.contains(target) {
            errors.push(format!("docs/src/SUMMARY.md:{n}: lists the chapter {target}, which docs/src does not hold"));
        }
    }
    for chapter in chapters {
        if chapter != "SUMMARY.md" && !listed.iter().any(|(_, t)| t == chapter) {
            errors.push(format!("docs/src/{chapter}: a chapter SUMMARY.md does not list; add it there"));
        }
    }
    errors
}

/// One fenced code block: its language and its lines with their numbers.
#[derive(Debug)]
struct Block<'a> {
    lang: &'a str,
    /// Line of the opening fence.
    line: usize,
    lines: Vec<(usize, &'a str)>,
}

/// The fenced code blocks of a Markdown text.
fn code_blocks(text: &str) -> Vec<Block<'_>> {
    let mut blocks = Vec::new();
    let mut open: Option<(&str, Block)> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        match &mut open {
            Some((fence, _)) if t.starts_with(*fence) && t[fence.len()..].trim().is_empty() => {
                blocks.push(open.take().unwrap().1);
            }
            Some((_, block)) => block.lines.push((i + 1, line)),
            None if t.starts_with("```") || t.starts_with("~~~") => {
                let fence = &t[..t.len() - t.trim_start_matches(['`', '~']).len()];
                let lang = t[fence.len()..].split([' ', ',', '{']).next().unwrap_or("").trim();
                open = Some((fence, Block { lang, line: i + 1, lines: Vec::new() }));
            }
            None => {}
        }
    }
    blocks
}

/// Rule 3: every fenced block names its language.
fn check_fence_langs(path: &Path, text: &str) -> Vec<String> {
    code_blocks(text)
        .iter()
        .filter(|b| b.lang.is_empty())
        .map(|b| {
            format!(
                "{}:{}: a code block without a language; say `sh` (commands, checked), `console` \
                 (`$ ` commands and their output, checked) or `text` (synopses, output)",
                path.display(),
                b.line
            )
        })
        .collect()
}

/// The command lines of the checked blocks of a text, with their first line's
/// number: comments skipped, `$ ` prompts stripped, continuations joined.
fn command_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for block in code_blocks(text).iter().filter(|b| COMMAND_LANGS.contains(&b.lang)) {
        let console = block.lang == "console";
        let mut pending: Option<(usize, String)> = None;
        for &(n, line) in &block.lines {
            let line = line.trim_end();
            let (start, text) = match pending.take() {
                Some((start, mut joined)) => {
                    joined.push(' ');
                    joined.push_str(line.trim_start());
                    (start, joined)
                }
                None => {
                    let t = line.trim_start();
                    let command = match t.strip_prefix("$ ") {
                        Some(c) => c,
                        None if console => continue,
                        None => t,
                    };
                    if command.is_empty() || command.starts_with('#') {
                        continue;
                    }
                    (n, command.to_owned())
                }
            };
            match text.strip_suffix('\\') {
                Some(head) => pending = Some((start, head.trim_end().to_owned())),
                None => out.push((start, text)),
            }
        }
        out.extend(pending);
    }
    out
}

/// The words of a command line as a shell splits them, up to the first `|`,
/// `>`, `<`, `;`, `&` or `#` comment outside quotes.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                let w = word.get_or_insert_with(String::new);
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    w.push(q);
                }
            }
            '\\' => {
                if let Some(next) = chars.next() {
                    word.get_or_insert_with(String::new).push(next);
                }
            }
            '|' | '>' | '<' | ';' | '&' => break,
            '#' if word.is_none() => break,
            c if c.is_whitespace() => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// The arguments after the program when the words run vramlab (`vramlab …`,
/// `cargo xtask …`); `None` for any other command.
fn vramlab_args(words: &[String]) -> Option<&[String]> {
    match words {
        [p, rest @ ..] if p == "vramlab" => Some(rest),
        [c, x, rest @ ..] if c == "cargo" && x == "xtask" => Some(rest),
        _ => None,
    }
}

/// Rule 4 over one document with a parser (`xtask::check_args` in the real
/// test): each rejected command line as `path:line: message`. Returns the
/// errors and the number of command lines checked.
fn check_commands(path: &Path, text: &str, parse: &dyn Fn(&[String]) -> Result<(), String>) -> (Vec<String>, usize) {
    let mut errors = Vec::new();
    let mut checked = 0;
    for (n, line) in command_lines(text) {
        let words = shell_words(&line);
        let Some(args) = vramlab_args(&words) else { continue };
        checked += 1;
        if let Err(message) = parse(args) {
            // clap's message without its usage and help lines.
            let message: Vec<&str> = message
                .lines()
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            let message = message.join(" ");
            errors.push(format!("{}:{n}: `{line}` is not accepted: {message}", path.display()));
        }
    }
    (errors, checked)
}

fn xtask_parse(args: &[String]) -> Result<(), String> {
    xtask::check_args(args)
}

#[test]
fn the_docs_are_true() {
    let root = workspace_root();
    let tree = Disk(root.clone());
    assert!(root.join("docs/book.toml").is_file(), "{}: no docs/book.toml; the guide is an mdBook", root.display());
    let summary = std::fs::read_to_string(root.join("docs/src/SUMMARY.md")).expect("docs/src/SUMMARY.md");
    let files = doc_files(&root);
    let chapters: Vec<String> =
        files.iter().filter_map(|p| p.strip_prefix("docs/src").ok()).map(|p| p.display().to_string()).collect();
    let mut errors = check_summary(&summary, &chapters);
    let (mut links, mut commands) = (0, 0);
    for file in &files {
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let (e, n) = check_links(file, &text, &tree);
        errors.extend(e);
        links += n;
        errors.extend(check_fence_langs(file, &text));
        let (e, n) = check_commands(file, &text, &xtask_parse);
        errors.extend(e);
        commands += n;
    }
    println!("{} files: {links} relative links and images, {commands} command lines checked", files.len());
    assert!(errors.is_empty(), "the docs say {} untrue thing(s):\n{}", errors.len(), errors.join("\n"));
    // Fewer than this means the readers found nothing: a broken test, not tidy docs.
    assert!(files.len() >= 8 && links >= 30 && commands >= 20, "only {links} links and {commands} commands found");
}

/// A tree of the given files (and their folders), with Markdown texts.
struct Planted(BTreeMap<PathBuf, String>);

impl Tree for Planted {
    fn exists(&self, path: &Path) -> bool {
        self.0.keys().any(|p| p == path || p.starts_with(path))
    }
    fn markdown(&self, path: &Path) -> Option<String> {
        self.0.get(path).cloned()
    }
}

fn planted(files: &[(&str, &str)]) -> Planted {
    Planted(files.iter().map(|(p, t)| (PathBuf::from(p), (*t).to_owned())).collect())
}

#[test]
fn a_broken_link_or_image_is_reported_with_its_line() {
    let guide = "# The report\n\n## Who holds the peak\n\n## Sizes: `--json` (v2)\n\n## Sizes: `--json` (v2)\n";
    let tree = planted(&[("docs/src/report.md", guide), ("docs/src/images/report.png", ""), ("CONFORMANCE.md", "")]);
    let good = "# vramlab\n\nSee [the report](docs/src/report.md#who-holds-the-peak), \
                [sizes](docs/src/report.md#sizes---json-v2-1) and [the folder](docs/src/).\n\n\
                ![shot](docs/src/images/report.png) [c](CONFORMANCE.md) [web](https://example.com/x)\n\
                [top](#vramlab)\n\n```sh\n[not](a-link.md)\n```\n`[nor](this.md)`\n";
    let (e, n) = check_links(Path::new("README.md"), good, &tree);
    assert_eq!(e, Vec::<String>::new());
    assert_eq!(n, 6);
    let bad = "# vramlab\n\nline two\n![shot](docs/report.png)\n[gone](docs/src/report.md#who-holds-memory)\n\
               [up](../../outside.md) [here](#nowhere)\n";
    let (e, _) = check_links(Path::new("README.md"), bad, &tree);
    assert_eq!(e.len(), 4, "{e:?}");
    assert!(e[0].starts_with("README.md:4:") && e[0].contains("docs/report.png"), "{}", e[0]);
    assert!(e[1].starts_with("README.md:5:") && e[1].contains("#who-holds-memory"), "{}", e[1]);
    assert!(e[2].contains("../../outside.md"), "{}", e[2]);
    assert!(e[3].contains("#nowhere"), "{}", e[3]);
    // From a chapter, paths are relative to the chapter's folder.
    let chapter = "[conf](../../CONFORMANCE.md) ![i](images/report.png) [x](report.md)\n[y](images/missing.png)\n";
    let (e, n) = check_links(Path::new("docs/src/check.md"), chapter, &tree);
    assert_eq!(n, 4);
    assert!(e.len() == 1 && e[0].starts_with("docs/src/check.md:2:"), "{e:?}");
}

#[test]
fn headings_make_github_anchors() {
    assert_eq!(slug("The replay report (`--json`)"), "the-replay-report---json");
    assert_eq!(
        slug("Example: an OOM with memory \"reserved but unallocated\""),
        "example-an-oom-with-memory-reserved-but-unallocated"
    );
    assert_eq!(slug("Recording a PyTorch script: `vramlab record`"), "recording-a-pytorch-script-vramlab-record");
    assert_eq!(slug("See [the guide](docs/x.md) — now"), "see-the-guide--now");
    let a = anchors("# A\n## A\n```sh\n# not a heading\n```\n#no\n### B_c\n");
    assert_eq!(a.into_iter().collect::<Vec<_>>(), ["a", "a-1", "b_c"]);
}

#[test]
fn a_chapter_missing_or_unlisted_is_reported() {
    let summary = "# Summary\n\n[Introduction](introduction.md)\n\n- [The bench](bench.md)\n- [Gone](gone.md)\n";
    let chapters: Vec<String> = ["SUMMARY.md", "introduction.md", "bench.md", "extra.md"].map(String::from).to_vec();
    let e = check_summary(summary, &chapters);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].starts_with("docs/src/SUMMARY.md:6:") && e[0].contains("gone.md"), "{}", e[0]);
    assert!(e[1].starts_with("docs/src/extra.md:") && e[1].contains("does not list"), "{}", e[1]);
    let all: Vec<String> = ["SUMMARY.md", "introduction.md", "bench.md", "gone.md"].map(String::from).to_vec();
    assert!(check_summary(summary, &all).is_empty());
}

#[test]
fn a_code_block_without_a_language_is_reported() {
    let text = "# x\n\n```sh\ncargo xtask bench\n```\n\n```\nvramlab replay x.pickle\n```\n~~~text\nout\n~~~\n";
    let e = check_fence_langs(Path::new("docs/src/x.md"), text);
    assert!(e.len() == 1 && e[0].starts_with("docs/src/x.md:7:"), "{e:?}");
}

#[test]
fn command_lines_are_read_as_a_shell_reads_them() {
    let text = "```console\n$ cargo xtask replay a.jsonl \\\n    --capacity 1GiB | jq .\noutput line\n\
                vramlab in the output\n```\n\n```sh\n# a comment\ncargo xtask bench --quick   # run it\n\n\
                $ vramlab whatif 'my file.pickle' --alloc-conf \"roundup_power2_divisions:[256:1,>:8]\"\n\
                python3 x.py && vramlab diff a b\n```\n\n```text\ncargo xtask bench [--out DIR]\n```\n";
    let lines = command_lines(text);
    let got: Vec<(usize, Vec<String>)> = lines.iter().map(|(n, l)| (*n, shell_words(l))).collect();
    let words = |s: &[&str]| s.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        got,
        [
            (2, words(&["cargo", "xtask", "replay", "a.jsonl", "--capacity", "1GiB"])),
            (10, words(&["cargo", "xtask", "bench", "--quick"])),
            (
                12,
                words(&["vramlab", "whatif", "my file.pickle", "--alloc-conf", "roundup_power2_divisions:[256:1,>:8]"])
            ),
            (13, words(&["python3", "x.py"])),
        ]
    );
    assert_eq!(vramlab_args(&got[0].1).unwrap(), &words(&["replay", "a.jsonl", "--capacity", "1GiB"])[..]);
    assert!(vramlab_args(&got[3].1).is_none());
}

#[test]
fn a_command_the_command_line_refuses_is_reported_with_clap_s_message() {
    let text = "# x\n\n```sh\ncargo xtask bench --quick --suite memory\nvramlab replay FILE --report DIR\n\
                cargo xtask bench --quikc\n```\n\n```console\n$ vramlab replay x.jsonl --capacity 3GB\nout\n```\n";
    let (e, n) = check_commands(Path::new("docs/src/x.md"), text, &xtask_parse);
    assert_eq!(n, 4);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].starts_with("docs/src/x.md:6: `cargo xtask bench --quikc`") && e[0].contains("--quikc"), "{}", e[0]);
    assert!(!e[0].contains("Usage:") && !e[0].contains("--help"), "{}", e[0]);
    assert!(e[1].starts_with("docs/src/x.md:10:") && e[1].contains("3GB"), "{}", e[1]);
}
