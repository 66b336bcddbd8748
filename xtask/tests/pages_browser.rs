//! The replay, what-if and diff pages of real PyTorch recordings in a headless
//! browser (Debian's `chromium`, as `tests/tests/report.rs` drives it): the peak
//! table names the recording script's own frame first, the what-if page shows
//! the capacity and each setting's out-of-memory, the diff page (the MLP's
//! snapshot against the transformer's) lists the call path with the largest
//! change first, a frame of the script, and at 1280 and 390 px
//! nothing scrolls sideways (tables scroll inside their own box) and the page
//! fetches nothing. On the replay page of a run with a capacity the
//! interactive timeline marks the allocated and reserved peaks, the
//! out-of-memory errors and the capacity, zooms on the wheel and on a
//! two-finger pinch, and its hover names a band's call path with a stack and
//! the block under the cursor, live there. Every page of a snapshot has its
//! answer card on the first screen, wide tables show they scroll, no label
//! overlaps another, the allocated peak's mark is at the replay's peak entry
//! and the hover there shows that entry, and a tap shows the readout.
//! Two results files compared (`diff A.json B.json`): the terminal table,
//! `--json` and the page. Without chromium it checks the HTML alone and prints
//! `skipped: no chromium (…)`; in CI (`CI` set) a missing chromium fails the test.

use std::path::PathBuf;
use std::process::Command;

use vramlab_engine::alloc::BlockState;
use vramlab_reports::testing::{chromium, chromium_run};

mod terminal;

fn xtask(args: &[&str]) -> String {
    let o = terminal::fits(Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).output().unwrap());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A results file with one profiled case, `memory/train_step`.
fn results(peak: u64, activation: u64, median_ns: f64) -> String {
    format!(
        r#"{{"schema_version":2,"vramlab_version":"0.1.0","started_at":"2026-11-27T00:00:00Z",
  "options":{{"suites":[],"device":"cpu","quick":true,"samples":null,"seed":1,"capacity_bytes":1}},
  "environment":{{"cpu_model":"x","cpu_cores":1,"host_memory_bytes":1,"gpus":[],"gpu_unavailable_reason":null,
  "device":"cpu","os":"linux","rustc":null,"git_commit":null}},
  "suites":[{{"name":"memory","description":"d","device":"cpu","duration_ns":1,"findings":[],
  "cases":[{{"name":"train_step","params":{{}},"outcome":{{"status":"ok"}},"metrics":{{}},"notes":[],"duration_ns":1,
  "memory":{{"device":"cpu:0","peak_allocated_bytes":{peak},"peak_reserved_bytes":{reserved},"peak_active_bytes":{peak},
  "peak_phase":"step/backward","by_category_at_peak_bytes":{{"activation":{activation},"parameter":1048576}},"allocator_events":9}},
  "timing":{{"clock":"host","iterations_per_sample":1,"median_ns":{m},"p25_ns":{m},"p75_ns":{m},"iqr_ns":0.0,
  "min_ns":{m},"max_ns":{m},"mean_ns":{m},"samples_ns":[{m}]}}}}]}}]}}"#,
        reserved = peak + (4 << 20),
        m = median_ns
    )
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
    let (capped, results_diff) = (out.join("replay-capped"), out.join("results-diff"));
    // Two results files: the terminal table, --json and the page.
    std::fs::create_dir_all(&out).unwrap();
    let (ra, rb) = (out.join("a.json"), out.join("b.json"));
    std::fs::write(&ra, results(100 << 20, 60 << 20, 2.0e6)).unwrap();
    std::fs::write(&rb, results(150 << 20, 90 << 20, 1.5e6)).unwrap();
    let (ra, rb) = (ra.to_str().unwrap(), rb.to_str().unwrap());
    let text = xtask(&["diff", ra, rb, "--case", "memory/train_step", "--report", results_diff.to_str().unwrap()]);
    assert!(text.contains("memory/train_step: peak allocated +50.00 MiB (+50.0 %)"), "{text}");
    assert!(text.contains("activation at the allocated peak"), "{text}");
    assert!(text.contains("−500.00 µs (−25.0 %)"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&xtask(&["diff", ra, rb, "--json"])).unwrap();
    assert_eq!(json["kind"], "results");
    let figures = &json["cases"][0]["figures"];
    assert_eq!(figures[0]["name"], "peak_allocated_bytes");
    assert_eq!(figures[0]["change"], (50u64 << 20) as f64);
    let o = Command::new(env!("CARGO_BIN_EXE_xtask")).args(["diff", ra, rb, "--case", "memory/nope"]).output();
    let o = terminal::fits(o.unwrap());
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no case memory/nope in both files"));
    let mlp = root.join("tests/data/torch-snapshots/mlp-default.pickle");
    xtask(&["diff", mlp.to_str().unwrap(), snap.to_str().unwrap(), "--report", diff.to_str().unwrap()]);
    // The largest change at the allocated peak: the MLP's parameters, gone.
    let diff_first_frame = "record_snapshots.py:44:mlp";
    xtask(&["replay", snap.to_str().unwrap(), "--report", replay.to_str().unwrap()]);
    // Under 300 MiB the recording (376 MiB reserved) runs out of memory: every mark on one chart.
    let args = ["replay", snap.to_str().unwrap(), "--capacity", "300MiB", "--report", capped.to_str().unwrap()];
    xtask(&args);
    // 300 MiB: the recorded settings (376 MiB reserved) run out; some settings may not.
    xtask(&["whatif", snap.to_str().unwrap(), "--capacity", "300MiB", "--sweep", "--report", whatif.to_str().unwrap()]);
    let first_frame = "record_snapshots.py:95:transformer";
    // The allocated peak's entry, as the replay reports it, without a capacity and under 300 MiB.
    let peak_of = |extra: &[&str]| -> u64 {
        let args: Vec<&str> = ["replay", snap.to_str().unwrap(), "--json"].iter().chain(extra).copied().collect();
        let json: serde_json::Value = serde_json::from_str(&xtask(&args)).unwrap();
        json["peak_allocated_index"].as_u64().expect("the allocated peak's entry")
    };
    let (peak_whole, peak_capped) = (peak_of(&[]), peak_of(&["--capacity", "300MiB"]));
    for dir in [&replay, &whatif] {
        let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
        let table = &html[html.find("<table class=\"holders\">").expect("the peak table")..];
        let first = table.split("<code class=\"frame\">").nth(1).unwrap();
        assert!(first.starts_with(first_frame), "{}", &first[..80.min(first.len())]);
        assert!(html.contains("Who holds the allocated peak"));
        assert!(
            !html.contains(" src=\"http") && html.matches("url(").count() == html.matches("url(#").count(),
            "offline"
        );
    }
    let w = std::fs::read_to_string(whatif.join("index.html")).unwrap();
    assert!(w.contains("capacity 300.00 MiB"), "the capacity line");
    assert!(w.contains("#1 OOM"), "the recorded settings' OOM point");
    assert!(w.contains("none: out of memory"), "headroom of a setting that runs out");
    let rd = std::fs::read_to_string(results_diff.join("index.html")).unwrap();
    assert!(
        rd.contains("<code>memory&#x2f;train_step</code>") && rd.contains("+50.00 MiB (+50.0 %)"),
        "the results diff page"
    );
    let d = std::fs::read_to_string(diff.join("index.html")).unwrap();
    assert!(d.contains("Peak reserved rose by 48.00 MiB"), "the diff's headline");
    assert!(!d.contains(" src=\"http") && d.matches("url(").count() == d.matches("url(#").count(), "offline");
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
    for (name, dir, first_frame) in [
        ("replay", &replay, first_frame),
        ("replay-capped", &capped, first_frame),
        ("whatif", &whatif, first_frame),
        ("diff", &diff, diff_first_frame),
        ("results-diff", &results_diff, ""),
    ] {
        // A copy of the page with a probe that writes the layout's figures into the DOM.
        let page = std::fs::read_to_string(dir.join("index.html")).unwrap();
        // Headless chromium keeps its window at least 500 px wide: the probe
        // narrows the page itself to the width asked for (#w=390), under the
        // same narrow-screen style rules (max-width: 600px), and takes the
        // right edge of every element outside a table's own scrolling box.
        // On the interactive timeline (replay pages) it also counts the marks,
        // zooms with the wheel and a two-finger pinch, and hovers the lowest band.
        let probe = r#"<script>(function(){var b=document.body,d=document.documentElement;
            var w=Math.min(window.innerWidth,+/w=(\d+)/.exec(location.hash)[1]);d.style.width=w+'px';
            window.dispatchEvent(new Event('resize'));
            var set=function(k,v){b.setAttribute('data-'+k,v);};
            var sv0=window.vramlabStateView,rm=document.querySelector('g.mark-reserved');
            set('state-first',sv0?sv0.state:'');set('reserved-state',rm?rm.getAttribute('data-state'):'');
            var right=0;document.querySelectorAll('body *').forEach(function(e){
            if(e.parentElement.closest('.scroll'))return;right=Math.max(right,e.getBoundingClientRect().right);});
            set('scroll-width',Math.ceil(Math.max(right,b.scrollWidth)));set('inner-width',w);
            var f=document.querySelector('table.holders tbody code.frame, table.diff tbody code.frame');
            set('first-frame',f?f.textContent:'');
            var ans=document.getElementById('answer');
            set('answer',ans?Math.round(ans.getBoundingClientRect().top)+' '+ans.textContent.replace(/\s+/g,' ').replace(/"/g,"'").slice(0,600):'none');
            var cues=0,wide=0;document.querySelectorAll('.scroll').forEach(function(e){if(e.scrollWidth>e.clientWidth+1){wide++;
            if(/gradient/.test(getComputedStyle(e).backgroundImage))cues++;}});set('scroll-cues',cues+'/'+wide);
            var out=performance.getEntriesByType('resource').map(function(r){return r.name;})
              .filter(function(u){return !/^(file|data|about):/.test(u);});
            set('requests',out.length?out.join(' '):'none');
            var fig=document.querySelector('figure[data-stacked]');
            if(!fig)return;
            var lbl=function(){var bx=Array.prototype.map.call(fig.querySelectorAll('text.label'),function(t){return t.getBoundingClientRect();}),ov=0;
            for(var i=0;i<bx.length;i++)for(var j=i+1;j<bx.length;j++){var a=bx[i],c=bx[j];
            if(a.left<c.right&&c.left<a.right&&a.top<c.bottom&&c.top<a.bottom)ov++;}return bx.length+' '+ov;};
            if(fig.getAttribute('data-stacked')==='overlay'){
            set('lines',fig.querySelectorAll('polyline.line-extra').length);set('labels',lbl());
            set('oom-marks',fig.querySelectorAll('.mark-oom').length);
            set('tick-px',fig.querySelector('text.st-ytick').getBoundingClientRect().height.toFixed(1));
            var ob=fig.querySelector('.tl-plot'),orr=ob.getBoundingClientRect(),rdo=document.getElementById('overlay-readout');
            var OT=function(t){ob.dispatchEvent(new PointerEvent(t,{pointerId:5,pointerType:'touch',clientX:orr.left+orr.width*0.4,clientY:orr.top+orr.height/2,bubbles:true}));};
            OT('pointerdown');OT('pointerup');set('tap-readout',rdo.textContent.replace(/"/g,"'"));
            var osp=function(){var v=fig.getAttribute('data-view').split(',');return v[1]-v[0];},o0=osp();
            for(var i=0;i<3;i++)ob.dispatchEvent(new WheelEvent('wheel',{deltaY:-100,clientX:orr.left+orr.width*0.5,clientY:orr.top+40,bubbles:true,cancelable:true}));
            set('zoom',o0+' '+osp());return;}
            var q=function(s){return fig.querySelectorAll(s).length;};
            set('marks',['mark-allocated','mark-reserved','mark-oom','capacity'].map(function(c){return c+':'+q('.'+c);}).join(' '));
            set('bands',q('polygon.band'));
            var tx=function(c){return Array.prototype.map.call(fig.querySelectorAll('text.'+c),function(t){return t.textContent;}).join('|');};
            set('yticks',tx('st-ytick'));set('xticks',tx('st-xtick'));
            var sr=fig.querySelector('svg').getBoundingClientRect(),inside=true;
            fig.querySelectorAll('text.st-ytick, text.st-xtick').forEach(function(t){var r=t.getBoundingClientRect();
            if(r.left<sr.left-0.5||r.right>sr.right+0.5)inside=false;});set('ticks-inside',inside);
            var boxes=Array.prototype.map.call(fig.querySelectorAll('text.label'),function(t){return t.getBoundingClientRect();}),over=0;
            for(var i=0;i<boxes.length;i++)for(var j=i+1;j<boxes.length;j++){var a=boxes[i],c=boxes[j];
            if(a.left<c.right&&c.left<a.right&&a.top<c.bottom&&c.top<a.bottom)over++;}
            set('labels',boxes.length+' '+over);
            var pk=fig.querySelector('g.mark-allocated'),pc=pk.querySelector('circle').getBoundingClientRect();
            set('peak-state',pk.getAttribute('data-state'));
            fig.querySelector('.tl-plot').dispatchEvent(new PointerEvent('pointermove',{pointerId:7,clientX:pc.left+pc.width/2+2,clientY:pc.top+pc.height/2,bubbles:true}));
            set('peak-readout',document.getElementById('memory-readout').textContent.replace(/"/g,"'"));
            var rd=document.getElementById('memory-readout');rd.textContent='';
            var pr=fig.querySelector('.tl-plot').getBoundingClientRect();
            var T=function(t){fig.querySelector('.tl-plot').dispatchEvent(new PointerEvent(t,{pointerId:5,pointerType:'touch',clientX:pr.left+pr.width*0.3,clientY:pr.bottom-40,bubbles:true}));};
            T('pointerdown');T('pointerup');set('tap-readout',rd.textContent.replace(/"/g,"'"));
            var ax=fig.querySelector('button[data-axis]');if(ax)ax.click();
            set('axis',(fig.getAttribute('data-axis')||'time')+' '+tx('st-xtick'));
            if(ax)ax.click();
            var box=fig.querySelector('.tl-plot'),r=box.getBoundingClientRect(),cx=r.left+r.width*0.6,cy=r.bottom-40;
            var span=function(){var v=(fig.getAttribute('data-view')||'0,1e99').split(',');return v[1]-v[0];};
            var s0=span();
            for(var i=0;i<3;i++)box.dispatchEvent(new WheelEvent('wheel',{deltaY:-100,clientX:cx,clientY:cy,bubbles:true,cancelable:true}));
            var s1=span();
            var P=function(t,id,x){box.dispatchEvent(new PointerEvent(t,{pointerId:id,pointerType:'touch',clientX:x,clientY:cy,bubbles:true}));};
            P('pointerdown',1,cx-20);P('pointerdown',2,cx+20);P('pointermove',2,cx+100);P('pointerup',1,cx-20);P('pointerup',2,cx+100);
            var s2=span();
            set('zoom',s0+' '+s1+' '+s2);
            box.dispatchEvent(new PointerEvent('pointermove',{pointerId:9,clientX:cx,clientY:r.bottom-33,bubbles:true}));
            set('readout',document.getElementById('memory-readout').textContent);
            set('live-block',fig.getAttribute('data-live-block')+'@'+fig.getAttribute('data-hover-state'));
            var st=document.getElementById('memory-stack');
            set('stack-frames',st.querySelectorAll('li').length);
            set('at-point',Array.prototype.map.call(st.querySelectorAll('table.at-point tr'),function(tr){
            return tr.cells[2].textContent+' '+tr.cells[3].textContent;}).join('|'));
            set('stack-text',st.textContent.slice(0,40000).replace(/"/g,"'"));
            var tl=window.vramlabTimelines[0],dk=-1;tl.setView(tl.full[0],tl.full[1]);
            tl.d.series.forEach(function(x,i){if(dk<0&&x.split)dk=i;});
            if(dk>=0){tl.drillTo(dk,0);var fu=fig.querySelector('.tl-split button[data-split-part]');if(fu)fu.click();
            var lys=tl.layers(),bad=0,n=tl.d.x.length,bc=0;
            for(var c=0;c<n;c++){var sm=0;lys.forEach(function(l){sm+=l.v[c];});if(sm!==tl.d.series[dk].v[c])bad++;
            if(lys[0].v[c]>lys[0].v[bc])bc=c;}
            var under=0;for(var j=0;j<dk;j++)under+=tl.d.series[j].v[bc];
            var G=tl.geom,sr2=tl.svg.getBoundingClientRect(),vx=tl.view;
            var gx=G.L+(tl.d.x[bc]-vx[0])/(vx[1]-vx[0])*G.pw+0.5,gy=G.T+G.ph-(under+lys[0].v[bc]/2)/G.maxB*G.ph;
            var pl0=fig.querySelector('.tl-plot');
            pl0.dispatchEvent(new PointerEvent('pointermove',{pointerId:13,clientX:sr2.left+gx*sr2.width/G.W,clientY:sr2.top+gy*sr2.height/G.H,bubbles:true}));
            set('drill',fig.getAttribute('data-drill')+'|'+fig.querySelectorAll('polygon.part').length+'/'+lys.length+'|'+bad+'|'+
            (fig.getAttribute('data-hover-part')===lys[0].label)+'|'+fig.querySelector('.tl-split').textContent.replace(/"/g,"'"));
            tl.drillTo(null);}
            var sv=window.vramlabStateView,sf=document.querySelector('figure[data-state-view]');
            if(!sv)return;
            var S=function(){return +sf.getAttribute('data-state');};
            var states=[S(),+pk.getAttribute('data-state'),Math.floor(sv.d.entries/3),sv.d.entries],got=[],drawn=[];
            states.forEach(function(s){sv.show(s);var g=sv.segments(S());got.push([S(),g]);
            var n=0;g.forEach(function(x){n+=x[5].length;});
            drawn.push(sf.querySelectorAll('.st-seg').length+'/'+g.length+' '+sf.querySelectorAll('rect.st-block').length+'/'+n);});
            set('states',JSON.stringify(got));set('state-drawn',drawn.join('|'));
            sv.show(states[1]);sf.querySelector('button[data-step="1"]').click();var a=S();
            sf.querySelector('button[data-step="-1"]').click();sf.querySelector('button[data-step="-1"]').click();
            set('state-steps',states[1]+' '+a+' '+S());
            var pl=fig.querySelector('.tl-plot'),pb=pl.getBoundingClientRect(),tx0=pb.left+pb.width*0.45;
            var C=function(t){pl.dispatchEvent(new PointerEvent(t,{pointerId:11,pointerType:'touch',clientX:tx0,clientY:pb.bottom-40,bubbles:true}));};
            C('pointerdown');C('pointerup');
            set('state-clicked',fig.getAttribute('data-hover-state')+' '+S()+' '+document.getElementById('state-summary').textContent.replace(/"/g,"'"));
            var mr=sf.querySelector('rect.st-block').getBoundingClientRect();
            sf.querySelector('.st-map svg').dispatchEvent(new PointerEvent('pointerdown',{pointerId:12,pointerType:'touch',clientX:mr.left+1,clientY:mr.top+mr.height/2,bubbles:true}));
            set('state-readout',document.getElementById('state-readout').textContent.replace(/"/g,"'"));
            })();</script></body>"#;
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
            assert_eq!(attr(&dom, "requests"), "none", "{name} at {width} px: a request left the page");
            // The answer on the first screen (the window is 900 px high), on every page of a snapshot.
            if name != "results-diff" {
                let answer = attr(&dom, "answer");
                let top: u32 = answer.split(' ').next().unwrap().parse().unwrap_or(u32::MAX);
                assert!(top < 900, "{name} at {width} px: the answer card is at {answer}");
                assert!(answer.contains("Top holders") || answer.contains("Largest changes"), "{name}: {answer}");
            }
            // A table that scrolls sideways in its box shows it.
            let cues = attr(&dom, "scroll-cues");
            let (with, wide) = cues.split_once('/').unwrap();
            assert_eq!(with, wide, "{name} at {width} px: wide tables without a scroll cue: {cues}");
            if name.starts_with("replay") {
                // Marks: both peaks always; the OOMs and the capacity where the run had them.
                let marks = attr(&dom, "marks");
                let count = |m: &str| -> u32 {
                    marks.split(' ').find_map(|kv| kv.strip_prefix(&format!("{m}:"))).unwrap().parse().unwrap()
                };
                assert!(count("mark-allocated") == 1 && count("mark-reserved") == 1, "{name} at {width} px: {marks}");
                let capped = name == "replay-capped";
                assert_eq!(count("capacity"), u32::from(capped), "{name} at {width} px: {marks}");
                assert_eq!(count("mark-oom") > 0, capped, "{name} at {width} px: {marks}");
                assert!(attr(&dom, "bands").parse::<u32>().unwrap() >= 2, "bands by call path");
                // No label over another (bounding boxes as drawn).
                let labels = attr(&dom, "labels");
                assert!(labels.ends_with(" 0") && !labels.starts_with("0 "), "{name} at {width} px: labels {labels}");
                // The allocated peak's mark at the entry that reaches the peak, and the hover there
                // shows that entry itself, not the highest of a group.
                let peak_index = if capped { peak_capped } else { peak_whole };
                let state: u64 = attr(&dom, "peak-state").parse().unwrap();
                assert_eq!(state - 1, peak_index, "{name}: the mark at the real peak entry");
                let peak_readout = attr(&dom, "peak-readout");
                assert!(
                    peak_readout.starts_with("peak allocated")
                        && peak_readout.contains(&format!("entry {} ", fmt_count(peak_index)))
                        && !peak_readout.contains("highest of"),
                    "{name} at {width} px: {peak_readout}"
                );
                // The allocation-order axis: whole entries, no time unit.
                let axis = attr(&dom, "axis");
                assert!(axis.starts_with("order ") && !axis.contains(" ms") && !axis.contains(" s|"), "{name}: {axis}");
                // A tap shows the readout.
                assert!(attr(&dom, "tap-readout").contains("reserved "), "{name} at {width} px: no readout on a tap");
                // Round ticks: y from 0 in equal steps of 1, 2 or 5 of one unit; every label inside the chart.
                let yticks = attr(&dom, "yticks");
                assert_round_steps(yticks, &format!("{name} at {width} px: y ticks"));
                assert!(attr(&dom, "xticks").split('|').count() >= 2, "{name} at {width} px: x ticks");
                assert_eq!(attr(&dom, "ticks-inside"), "true", "{name} at {width} px: a tick label leaves the chart");
                // The wheel zooms in (the span shrinks), the pinch further.
                let z: Vec<f64> = attr(&dom, "zoom").split(' ').map(|v| v.parse().unwrap()).collect();
                assert!(z[1] < z[0] * 0.6 && z[2] < z[1] * 0.8, "{name} at {width} px: zoom spans {z:?}");
                // The hover: the entry and a band's call path with its largest block's stack.
                let readout = attr(&dom, "readout");
                assert!(readout.contains("entry ") && readout.contains("reserved "), "{readout}");
                assert!(attr(&dom, "stack-frames").parse::<u32>().unwrap() > 0, "a stack on hover");
                let stack = attr(&dom, "stack-text");
                assert!(
                    stack.contains("live here") && stack.contains("Largest block made on this call path"),
                    "{stack}"
                );
                assert!(stack.contains("record_snapshots.py"), "the stack has the script's frame: {stack}");
                // The block under the cursor is live at the cursor: allocated before the column's
                // state (entries applied) and freed at or after it.
                let live = attr(&dom, "live-block");
                let (block, state) = live.split_once('@').unwrap();
                let (alloc, freed) = block.split_once(',').unwrap_or_else(|| panic!("{name}: no block: {live}"));
                let (alloc, state): (i64, i64) = (alloc.parse().unwrap(), state.parse().unwrap());
                assert!(alloc < state, "{name} at {width} px: allocated after the cursor: {live}");
                assert!(freed.is_empty() || freed.parse::<i64>().unwrap() >= state, "{name}: freed before: {live}");
                assert!(stack.contains("Block under the cursor"), "{stack}");
                // Who holds the memory at the hovered point: each band's bytes and share, largest
                // first, the shares adding up to the whole.
                let rows: Vec<f64> = attr(&dom, "at-point")
                    .split('|')
                    .map(|r| r.rsplit(' ').nth(1).unwrap().parse().unwrap_or_else(|_| panic!("{r}")))
                    .collect();
                assert!(!rows.is_empty(), "{name} at {width} px: no table at the point");
                assert!((rows.iter().sum::<f64>() - 100.0).abs() < 0.1 * rows.len() as f64, "shares {rows:?}");
                assert!(rows.windows(2).all(|w| w[0] >= w[1]), "largest first: {rows:?}");
            }
            if name == "whatif" || name == "diff" {
                // The interactive chart: two lines per replay (reserved, allocated), labels apart,
                // ticks legible at 390 px, a tap shows every line's memory, the wheel zooms.
                let lines: u32 = attr(&dom, "lines").parse().unwrap();
                assert!(lines >= 4 && lines.is_multiple_of(2), "{name} at {width} px: {lines} lines");
                let labels = attr(&dom, "labels");
                assert!(labels.ends_with(" 0") && !labels.starts_with("0 "), "{name} at {width} px: labels {labels}");
                let tick: f64 = attr(&dom, "tick-px").parse().unwrap();
                assert!(tick >= 9.0, "{name} at {width} px: tick text {tick} px high");
                let tap = attr(&dom, "tap-readout");
                let first = if name == "diff" { "A reserved " } else { "#1 reserved " };
                assert!(tap.contains(first) && tap.contains("after "), "{name} at {width} px: tap readout {tap}");
                let z: Vec<f64> = attr(&dom, "zoom").split(' ').map(|v| v.parse().unwrap()).collect();
                assert!(z[1] < z[0] * 0.6, "{name} at {width} px: zoom {z:?}");
                if name == "whatif" {
                    assert!(attr(&dom, "oom-marks").parse::<u32>().unwrap() > 0, "{name}: the OOM marked");
                }
                println!("{name} at {width} px: {lines} lines, labels {labels}, ticks {tick} px, tap: {tap}");
            }
            if name.starts_with("replay") {
                // A band split by its next frames, then one part split further: its parts
                // drawn, summing to the band at every column, and the hover names the part.
                let drill = attr(&dom, "drill");
                let d: Vec<&str> = drill.splitn(5, '|').collect();
                let (drawn, layers) = d[1].split_once('/').unwrap();
                assert!(
                    d[0].contains(':') && drawn == layers && layers.parse::<u32>().unwrap() >= 2,
                    "{name}: {drill}"
                );
                assert_eq!((d[2], d[3]), ("0", "true"), "{name} at {width} px: parts' sums and the hover: {drill}");
                assert!(d[4].contains("split by its next frames") && d[4].contains(".py:"), "{name}: {drill}");
                println!("{name} at {width} px: drilled {drill}");
                let capacity = (name == "replay-capped").then_some(300u64 << 20);
                check_states(&dom, &snap, capacity, &format!("{name} at {width} px"));
            }
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

/// The replay page's allocator state at an entry, as the page rebuilds it,
/// equals the segments of a replay of `snap` stopped at that entry: at the
/// state a tap on the timeline chose, the allocated peak, a third of the way
/// and the end (where a replay that stops at an OOM ends); the map draws every segment and block; the step buttons
/// move one entry; a click on the timeline shows the state at its column; a
/// tap on a block names it.
fn check_states(dom: &str, snap: &std::path::Path, capacity: Option<u64>, what: &str) {
    use vramlab_snapshot::{SnapshotReplayOptions, read_snapshot_file, replay_snapshot_state_at};
    let snapshot = read_snapshot_file(snap).unwrap();
    let opts = SnapshotReplayOptions { capacity_bytes: capacity, ..Default::default() };
    let states: serde_json::Value = serde_json::from_str(attr(dom, "states")).unwrap();
    let states = states.as_array().unwrap();
    assert_eq!(states.len(), 4, "{what}");
    for s in states {
        let state = s[0].as_u64().unwrap();
        let replayed = replay_snapshot_state_at(&snapshot, &opts, state).unwrap().expect("the replay reaches it");
        let replayed: Vec<serde_json::Value> = replayed
            .iter()
            .map(|g| {
                let blocks: Vec<serde_json::Value> = g
                    .blocks
                    .iter()
                    .map(|&(off, size, st)| {
                        let code = match st {
                            BlockState::Inactive => 0,
                            BlockState::ActiveAllocated => 1,
                            BlockState::ActivePendingFree => 2,
                        };
                        serde_json::json!([off, size, code])
                    })
                    .collect();
                serde_json::json!([g.address, g.total_size, g.stream, g.small, g.expandable, blocks])
            })
            .collect();
        assert!(!replayed.is_empty(), "{what}: segments after {state} entries");
        assert_eq!(s[1], serde_json::Value::Array(replayed), "{what}: the page's state after {state} entries");
    }
    for d in attr(dom, "state-drawn").split('|') {
        let (rows, blocks) = d.split_once(' ').unwrap();
        let same = |p: &str| p.split_once('/').is_some_and(|(a, b)| a == b);
        assert!(same(rows) && same(blocks), "{what}: drawn/held rows and blocks: {d}");
    }
    // The first state shown is the reserved peak's; a step forward and two back.
    assert_eq!(attr(dom, "state-first"), attr(dom, "reserved-state"), "{what}");
    let steps: Vec<u64> = attr(dom, "state-steps").split(' ').map(|v| v.parse().unwrap()).collect();
    assert_eq!((steps[1], steps[2]), (steps[0] + 1, steps[0] - 1), "{what}: steps {steps:?}");
    let clicked = attr(dom, "state-clicked");
    let mut parts = clicked.splitn(3, ' ');
    let (hovered, shown) = (parts.next().unwrap(), parts.next().unwrap());
    assert_eq!(hovered, shown, "{what}: a click on the timeline shows the state at its column: {clicked}");
    assert!(clicked.contains("clicked on the timeline") && clicked.contains(" segment"), "{what}: {clicked}");
    let readout = attr(dom, "state-readout");
    assert!(readout.starts_with("block at 0x") && readout.contains("segment 0x"), "{what}: tap on a block: {readout}");
    let at: Vec<String> = states.iter().map(|s| s[0].to_string()).collect();
    println!("{what}: the page's state after {} entries is the replay's; {clicked}", at.join(", "));
}

/// `n` as the page writes an entry number (`toLocaleString("en")`: 12,345).
fn fmt_count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Tick labels `0 U|s U|2s U|…` (one unit U): they start at 0 and go up in equal
/// steps whose leading digit is 1, 2 or 5.
fn assert_round_steps(labels: &str, what: &str) {
    let values: Vec<(f64, &str)> = labels
        .split('|')
        .map(|l| {
            let (n, unit) = l.split_once(' ').unwrap_or_else(|| panic!("{what}: {labels}"));
            (n.parse::<f64>().unwrap_or_else(|_| panic!("{what}: {labels}")), unit)
        })
        .collect();
    assert!(values.len() >= 2 && values[0].0 == 0.0, "{what}: {labels}");
    assert!(values.iter().all(|v| v.1 == values[0].1), "{what}: one unit: {labels}");
    let step = values[1].0;
    let mantissa = step / 10f64.powf(step.log10().floor());
    assert!([1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-9), "{what}: step {step}: {labels}");
    for (i, v) in values.iter().enumerate() {
        assert!((v.0 - step * i as f64).abs() < 1e-9 * step.max(1.0), "{what}: {labels}");
    }
}
