//! The replay, what-if and diff pages of real PyTorch recordings in a headless
//! browser (Debian's `chromium`, as `tests/tests/report.rs` drives it): the peak
//! table names the recording script's own frame first, the what-if page shows
//! the capacity and each setting's out-of-memory, the diff page (the MLP's
//! snapshot against the transformer's) lists the call path with the largest
//! change first, a frame of the script, and at 1280 and 390 px
//! nothing scrolls sideways (tables scroll inside their own box). Without
//! chromium it checks the HTML alone and prints `skipped: no chromium (…)`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn xtask(args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"].iter().find_map(|name| {
        let out = Command::new("sh").arg("-c").arg(format!("command -v {name}")).output().ok()?;
        out.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    })
}

fn chromium_run(browser: &Path, profile: &Path, args: &[String]) -> std::process::Output {
    Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .output()
        .expect("chromium runs")
}

/// The value of `data-NAME="…"` on the dumped page's body.
fn attr<'a>(dom: &'a str, name: &str) -> &'a str {
    let key = format!("data-{name}=\"");
    let rest = &dom[dom.find(&key).unwrap_or_else(|| panic!("no {key} in the DOM")) + key.len()..];
    &rest[..rest.find('"').unwrap()]
}

#[test]
fn replay_whatif_and_diff_pages_name_the_users_code_and_fit_a_phone() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let snap = root.join("tests/data/torch-snapshots/transformer-default.pickle");
    let out = std::env::temp_dir().join(format!("vramlab-pages-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let (replay, whatif, diff) = (out.join("replay"), out.join("whatif"), out.join("diff"));
    let mlp = root.join("tests/data/torch-snapshots/mlp-default.pickle");
    xtask(&["diff", mlp.to_str().unwrap(), snap.to_str().unwrap(), "--report", diff.to_str().unwrap()]);
    // The largest change at the allocated peak: the MLP's parameters, gone.
    let diff_first_frame = "record_snapshots.py:44:mlp";
    xtask(&["replay", snap.to_str().unwrap(), "--report", replay.to_str().unwrap()]);
    // 300 MiB: the recorded settings (376 MiB reserved) run out; some settings may not.
    xtask(&["whatif", snap.to_str().unwrap(), "--capacity", "300MiB", "--sweep", "--report", whatif.to_str().unwrap()]);
    let first_frame = "record_snapshots.py:95:transformer";
    for dir in [&replay, &whatif] {
        let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
        let table = &html[html.find("<table class=\"holders\">").expect("the peak table")..];
        let first = table.split("<code class=\"frame\">").nth(1).unwrap();
        assert!(first.starts_with(first_frame), "{}", &first[..80.min(first.len())]);
        assert!(html.contains("Who holds the allocated peak"));
        assert!(!html.contains(" src=\"http") && !html.contains("url("), "offline");
    }
    let w = std::fs::read_to_string(whatif.join("index.html")).unwrap();
    assert!(w.contains("capacity 300.00 MiB"), "the capacity line");
    assert!(w.contains("#1 OOM"), "the recorded settings' OOM point");
    assert!(w.contains("none: out of memory"), "headroom of a setting that runs out");
    let d = std::fs::read_to_string(diff.join("index.html")).unwrap();
    assert!(d.contains("Peak reserved rose by 48.00 MiB"), "the diff's headline");
    assert!(!d.contains(" src=\"http") && !d.contains("url("), "offline");
    let r = std::fs::read_to_string(replay.join("index.html")).unwrap();
    assert!(r.contains("peak allocated 245.74 MiB") && r.contains("peak reserved 376.00 MiB"), "both peaks marked");
    // The x axis in time (the recording's time_us), the entry index on each mark.
    assert!(r.contains("time since the first entry (ms)"), "a time axis");
    assert!(r.contains("peak allocated 245.74 MiB · entry 518"), "the mark's entry index");

    let Some(browser) = chromium() else {
        println!("skipped: no chromium (install Debian's chromium package to run the browser half)");
        return;
    };
    let profile = out.join("chromium-profile");
    let shots = root.join("target/report-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    for (name, dir, first_frame) in
        [("replay", &replay, first_frame), ("whatif", &whatif, first_frame), ("diff", &diff, diff_first_frame)]
    {
        // A copy of the page with a probe that writes the layout's figures into the DOM.
        let page = std::fs::read_to_string(dir.join("index.html")).unwrap();
        // Headless chromium keeps its window at least 500 px wide: the probe
        // narrows the page itself to the width asked for (#w=390), under the
        // same narrow-screen style rules (max-width: 600px), and takes the
        // right edge of every element outside a table's own scrolling box.
        let probe = "<script>var b=document.body,d=document.documentElement;\
            var w=Math.min(window.innerWidth,+location.hash.slice(3));d.style.width=w+'px';\
            var right=0;document.querySelectorAll('body *').forEach(function(e){\
            if(e.parentElement.closest('.scroll'))return;right=Math.max(right,e.getBoundingClientRect().right);});\
            b.setAttribute('data-scroll-width',Math.ceil(Math.max(right,b.scrollWidth)));b.setAttribute('data-inner-width',w);\
            b.setAttribute('data-first-frame',document.querySelector('table.holders tbody code.frame, table.diff tbody code.frame').textContent);\
            </script></body>";
        std::fs::write(dir.join("probe.html"), page.replace("</body>", probe)).unwrap();
        for width in [1280u32, 390] {
            let url = format!("file://{}#w={width}", dir.join("probe.html").display());
            let o = chromium_run(
                &browser,
                &profile,
                &[
                    format!("--window-size={width},900"),
                    "--virtual-time-budget=1000".into(),
                    "--dump-dom".into(),
                    url.clone(),
                ],
            );
            let dom = String::from_utf8_lossy(&o.stdout);
            let log = String::from_utf8_lossy(&o.stderr);
            assert_eq!(attr(&dom, "first-frame"), first_frame, "{name} at {width} px");
            let (scroll, inner): (u32, u32) =
                (attr(&dom, "scroll-width").parse().unwrap(), attr(&dom, "inner-width").parse().unwrap());
            assert!(scroll <= inner, "{name} at {width} px scrolls sideways: {scroll} px wide in {inner}");
            for bad in ["Uncaught", "ERR_", "net::"] {
                assert!(!log.lines().any(|l| l.contains(bad) && !l.contains("dbus")), "{name}: {bad}:\n{log}");
            }
            let shot = shots.join(format!("{name}-{width}.png"));
            let _ = std::fs::remove_file(&shot);
            chromium_run(
                &browser,
                &profile,
                &[
                    format!("--window-size={width},2400"),
                    format!("--screenshot={}", shot.display()),
                    format!("file://{}", dir.join("index.html").display()),
                ],
            );
            assert!(std::fs::metadata(&shot).is_ok_and(|m| m.len() > 1000), "no screenshot {}", shot.display());
            println!("{name} at {width} px: {scroll} px wide; screenshot {}", shot.display());
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}
