//! The Python package end to end, from `cargo test`: a virtual environment
//! kept under `target/python-venv/` (created once, with maturin, pytest,
//! nbclient and ipykernel from PyPI at the versions below), the wheel built by
//! maturin from `pyproject.toml` in release, as `pip install .` builds it, into
//! the workspace's target folder, where the release `xtask` the other
//! end-to-end tests build (`vramlab_tests::xtask_release`) has every
//! dependency compiled with the same features (the extension module leaves
//! out PyO3's macros for that): only PyO3 and the module are compiled (about
//! 20 s); then it is installed, then the pytest suite in `python/tests/` (the API,
//! `record` against a stand-in torch, the `vramlab` command, the wheel's
//! contents and version, a notebook executed), and last the notebook's HTML
//! output in Chromium: the replay page inside its iframe, drawn by its own
//! scripts, fetching nothing. Without `python3` or PyPI it fails, never
//! skips: the package is part of the product.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use vramlab_reports::testing::{chromium, chromium_run};

/// What the environment holds; a change of this list makes it anew.
const REQUIREMENTS: &[&str] = &["maturin==1.16.0", "pytest==9.2.0", "nbclient==0.11.0", "ipykernel==7.4.0"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

/// Runs `cmd`, failing the test with its output when it fails.
fn run(cmd: &mut Command, what: &str) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The environment's Python, the environment made first where it is missing
/// or holds another list of requirements.
fn venv() -> PathBuf {
    let version = Command::new("python3").arg("--version").output().ok().filter(|o| o.status.success());
    let version = version.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let version = version
        .expect("the Python package's tests need python3 with venv on PATH (Debian: apt-get install python3-venv)");
    let dir = target_dir().join("python-venv");
    let python = dir.join("bin").join("python");
    // The environment is made anew for another Python or other requirements.
    let marker = dir.join("requirements.txt");
    let wanted = format!("# {version}\n{}", REQUIREMENTS.join("\n"));
    if python.exists() && std::fs::read_to_string(&marker).is_ok_and(|m| m == wanted) {
        return python;
    }
    let _ = std::fs::remove_dir_all(&dir);
    run(Command::new("python3").args(["-m", "venv"]).arg(&dir), "python3 -m venv");
    run(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
            .args(REQUIREMENTS),
        "pip install (PyPI must be reachable)",
    );
    std::fs::write(&marker, wanted).unwrap();
    python
}

/// Builds the wheel (release) into a fresh folder and installs it: the wheel's path.
fn build_and_install(python: &Path) -> PathBuf {
    let wheels = target_dir().join("python-wheels");
    let _ = std::fs::remove_dir_all(&wheels);
    let bin = python.parent().unwrap();
    run(
        Command::new(bin.join("maturin"))
            .args(["build", "--release", "--quiet", "--interpreter"])
            .arg(python)
            .arg("--out")
            .arg(&wheels)
            .current_dir(root())
            .env("PATH", path_with(bin)),
        "maturin build",
    );
    let wheel = std::fs::read_dir(&wheels)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .expect("maturin wrote a wheel");
    run(
        Command::new(python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--force-reinstall", "--no-deps"])
            .arg(&wheel),
        "pip install the wheel",
    );
    wheel
}

/// `PATH` with `bin` first.
fn path_with(bin: &Path) -> std::ffi::OsString {
    let mut paths = vec![bin.to_path_buf()];
    paths.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    std::env::join_paths(paths).unwrap()
}

/// The value of `data-NAME="…"` on the dumped page's body.
fn attr<'a>(dom: &'a str, name: &str) -> &'a str {
    let key = format!("data-{name}=\"");
    let rest = &dom[dom.find(&key).unwrap_or_else(|| panic!("no {key} in the DOM:\n{dom}")) + key.len()..];
    &rest[..rest.find('"').unwrap()]
}

/// The notebook's output as a notebook shows it, probed in Chromium: the
/// page inside the iframe drew its interactive timeline and fetched nothing,
/// and the iframe grew to the page's height.
fn check_in_chromium(output: &Path) {
    let Some(browser) = chromium() else {
        println!("skipped the browser check: no chromium (outside CI)");
        return;
    };
    let dir = output.parent().unwrap();
    let html = std::fs::read_to_string(output).unwrap();
    let probe = r#"<script>window.addEventListener('load',function(){setTimeout(function(){
        var b=document.body,set=function(k,v){b.setAttribute('data-'+k,String(v));};
        var f=document.querySelector('iframe.vramlab-report');set('iframes',document.querySelectorAll('iframe').length);
        var d=f.contentDocument,w=f.contentWindow,fig=d.querySelector('figure[data-stacked]');
        set('title',d.title);set('bands',fig?fig.querySelectorAll('polygon.band').length:-1);
        set('peaks',fig?fig.querySelectorAll('.mark-allocated, .mark-reserved').length:-1);
        set('summary',/peak reserved/i.test(d.body.textContent));
        var names=function(p){return p.getEntriesByType('resource').map(function(r){return r.name;});};
        var out=names(w.performance).concat(names(performance)).filter(function(u){return !/^(file|data|about):/.test(u);});
        set('requests',out.length?out.join(' '):'none');set('height',Math.round(f.getBoundingClientRect().height));
        },500);});</script>"#;
    let page = format!("<!doctype html><html><head><meta charset=\"utf-8\"></head><body>{html}{probe}</body></html>");
    let probe_page = dir.join("notebook-probe.html");
    std::fs::write(&probe_page, page).unwrap();
    let profile = dir.join("chromium-profile");
    let o = chromium_run(
        &browser,
        &profile,
        &[
            "--window-size=1280,900".into(),
            "--virtual-time-budget=3000".into(),
            "--dump-dom".into(),
            format!("file://{}", probe_page.display()),
        ],
    );
    let dom = String::from_utf8_lossy(&o.stdout);
    let log = String::from_utf8_lossy(&o.stderr);
    assert_eq!(attr(&dom, "iframes"), "1");
    assert!(attr(&dom, "title").starts_with("vramlab replay of "), "{}", attr(&dom, "title"));
    assert_eq!(attr(&dom, "summary"), "true", "the page's summary");
    assert!(attr(&dom, "bands").parse::<i64>().unwrap() >= 2, "the timeline's bands by call path");
    assert_eq!(attr(&dom, "peaks"), "2", "the allocated and reserved peaks marked");
    assert_eq!(attr(&dom, "requests"), "none", "a request left the notebook's output");
    assert!(attr(&dom, "height").parse::<u32>().unwrap() > 720, "the iframe grows to its page");
    for bad in ["Uncaught", "ERR_", "net::"] {
        assert!(!log.lines().any(|l| l.contains(bad) && !l.contains("dbus")), "{bad}:\n{log}");
    }
    let shot = dir.join("notebook-output.png");
    chromium_run(
        &browser,
        &profile,
        &[
            "--window-size=1280,1400".into(),
            format!("--screenshot={}", shot.display()),
            format!("file://{}", probe_page.display()),
        ],
    );
    println!("the notebook's output in Chromium: screenshot {}", shot.display());
}

#[test]
fn the_python_package_builds_installs_and_passes_its_tests() {
    let python = venv();
    let wheel = build_and_install(&python);
    let out_dir = target_dir().join("python-test-output");
    let _ = std::fs::remove_dir_all(&out_dir);
    let o = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests"])
        .current_dir(root())
        .env("VRAMLAB_WHEEL", &wheel)
        .env("VRAMLAB_NOTEBOOK_OUT", &out_dir)
        .env("PATH", path_with(python.parent().unwrap()))
        .output()
        .expect("pytest runs");
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    println!("{text}");
    assert!(o.status.success(), "the pytest suite failed:\n{text}");
    assert!(!text.contains(" skipped"), "a pytest test skipped:\n{text}");
    check_in_chromium(&out_dir.join("replay-output.html"));
}
