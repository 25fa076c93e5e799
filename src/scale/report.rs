//! The scaling report: results JSON, a Markdown table in the case study's form (requests/s
//! per configuration per step, and the % change from step to step), an SVG chart of requests/s
//! against CPUs with one line per configuration, and an HTML page with both — the case
//! study's own figures beside ours for reference.
//!
//! Owns: the output files. Must not touch: measuring.

use super::plan::{Configuration, Workload};
use super::results::{Row, ScaleResults};
use std::fmt::Write;
use std::path::Path;

/// The case study's figures (HP DL980 G7, requests/s change; 20 cores = baseline).
pub const CASE_STUDY: [(&str, &str, &str, &str); 3] = [
    ("Hosting (N pools × 1 process)", "+67 %", "+64 %", "+18 %"),
    (
        "Web garden (1 pool × N processes)",
        "+41 %",
        "+31 %",
        "−4 %",
    ),
    ("Default (1 pool × 1 process)", "−2 %", "−3 %", "+3 %"),
];

const COLORS: [&str; 3] = ["#1b7837", "#2166ac", "#b2182b"];

fn rps_of(rows: &[Row], w: Workload, c: Configuration, units: usize) -> Option<&Row> {
    rows.iter()
        .find(|r| r.workload == w && r.configuration == c && r.units == units)
}

/// The server's CPU count at a step: from the rows (which also covers remote targets), else
/// from the plan.
fn step_cpu_count(r: &ScaleResults, units: usize) -> usize {
    r.rows
        .iter()
        .find(|x| x.units == units)
        .map(|x| x.cpu_count)
        .unwrap_or_else(|| r.plan.step_cpus(units).len())
}

fn change(from: f64, to: f64) -> String {
    if from <= 0.0 {
        return "–".into();
    }
    let pct = (to / from - 1.0) * 100.0;
    if pct >= 0.0 {
        format!("+{pct:.0} %")
    } else {
        format!("−{:.0} %", -pct)
    }
}

fn thousands(v: f64) -> String {
    let n = v.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn workloads(r: &ScaleResults) -> Vec<Workload> {
    let mut w: Vec<Workload> = Vec::new();
    for row in &r.rows {
        if !w.contains(&row.workload) {
            w.push(row.workload);
        }
    }
    w
}

fn configurations(r: &ScaleResults) -> Vec<Configuration> {
    Configuration::ALL
        .into_iter()
        .filter(|c| r.rows.iter().any(|row| row.configuration == *c))
        .collect()
}

/// The table of one workload: header cells and rows of cells.
fn table(r: &ScaleResults, w: Workload) -> (Vec<String>, Vec<Vec<String>>) {
    let steps = &r.plan.steps;
    let kind = r.plan.unit_kind;
    let mut header = vec!["configuration".to_string()];
    for &s in steps {
        let n = step_cpu_count(r, s);
        header.push(format!(
            "{} ({n} CPU{})",
            kind.noun(s),
            if n == 1 { "" } else { "s" }
        ));
    }
    for pair in steps.windows(2) {
        header.push(format!("{} → {}", pair[0], pair[1]));
    }
    let mut body = Vec::new();
    for c in configurations(r) {
        let mut row = vec![c.title().to_string()];
        let values: Vec<f64> = steps
            .iter()
            .map(|&s| rps_of(&r.rows, w, c, s).map_or(0.0, |x| x.rps))
            .collect();
        row.extend(values.iter().map(|v| thousands(*v)));
        row.extend(values.windows(2).map(|p| change(p[0], p[1])));
        body.push(row);
    }
    (header, body)
}

fn markdown_table(header: &[String], body: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n", header.join(" | "));
    out.push_str(&format!("| --- |{}\n", " ---: |".repeat(header.len() - 1)));
    for row in body {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

fn setup_text(r: &ScaleResults) -> String {
    let p = &r.plan;
    if p.units.is_empty() {
        return format!(
            "Server: {}, started by hand at each step (`--target` mode); steps: {}. Load generator (`espalier bench`, {} keep-alive connections, {}) on this machine's CPUs {}. \
             Each cell is requests/s {}.",
            r.machine,
            p.steps.iter().map(|&s| format!("{} = {} CPUs", p.unit_kind.noun(s), step_cpu_count(r, s))).collect::<Vec<_>>().join("; "),
            r.connections,
            r.transport.describe(),
            p.load_cpus,
            measured(r)
        );
    }
    format!(
        "Machine: {}. The server grows over {}s ({}); the load generator (`espalier bench`, {} keep-alive connections, {}) runs on CPUs {}{}. \
         Each cell is requests/s {}.",
        r.machine,
        p.unit_kind.noun(1).trim_start_matches("1 "),
        p.steps.iter().map(|&s| format!("{} = CPUs {}", p.unit_kind.noun(s), p.step_cpus(s))).collect::<Vec<_>>().join("; "),
        r.connections,
        r.transport.describe(),
        p.load_cpus,
        if p.shared_load {
            " — **shared with the server** (the machine has too few units to keep them apart), so the larger steps understate scaling; \
             connections are spread by the kernel's reuseport hash rather than steered to the receiving CPU, which on loopback is the load generator's"
        } else {
            ", which the server never uses"
        },
        measured(r)
    )
}

/// What each cell measured: a time, or (`--requests`) a count of responses.
fn measured(r: &ScaleResults) -> String {
    match r.requests {
        Some(n) => format!("over {n} responses after {} s of warm-up", r.warmup_s),
        None => format!("over {} s after {} s of warm-up", r.duration_s, r.warmup_s),
    }
}

pub fn markdown(r: &ScaleResults) -> String {
    let mut out = format!("# espalier scale — {}\n\n{}\n", r.date, setup_text(r));
    for w in workloads(r) {
        let (h, b) = table(r, w);
        let _ = write!(
            out,
            "\n## {} workload\n\n{}\n![requests/s against CPUs](chart-{}.svg)\n",
            w.name(),
            markdown_table(&h, &b),
            w.name()
        );
    }
    if let Some(i) = &r.isolation {
        let _ = write!(
            out,
            "\n## Isolation (the web-gardening seed's second pool)\n\nPool A is saturated with CPU-heavy requests; pool B receives {} requests/s of the static page. \
             With the mask, A runs on CPUs {} and B alone on CPU {}.\n\n\
             | pool B latency | p50 ms | p99 ms | max ms | pool A requests/s |\n| --- | ---: | ---: | ---: | ---: |\n\
             | without the mask | {:.2} | {:.2} | {:.2} | {:.0} |\n| with the mask | {:.2} | {:.2} | {:.2} | {:.0} |\n",
            i.pool_b_rate,
            i.pool_a_cpus_masked,
            i.pool_b_cpus_masked,
            i.pool_b_unmasked.p50,
            i.pool_b_unmasked.p99,
            i.pool_b_unmasked.max,
            i.pool_a_rps_unmasked,
            i.pool_b_masked.p50,
            i.pool_b_masked.p99,
            i.pool_b_masked.max,
            i.pool_a_rps_masked
        );
    }
    out.push_str("\n## The case study, for reference\n\nIIS 8.0 on an HP DL980 G7 (8 sockets × 10 cores), requests/s change, 20 cores = baseline:\n\n");
    out.push_str("| configuration | 20 → 40 cores | 40 → 80 cores | hyper-threading on |\n| --- | ---: | ---: | ---: |\n");
    for (c, a, b, h) in CASE_STUDY {
        let _ = writeln!(out, "| {c} | {a} | {b} | {h} |");
    }
    out
}

/// An SVG line chart of requests/s against the server's CPU count, one line per configuration.
pub fn svg(r: &ScaleResults, w: Workload) -> String {
    let (width, height) = (720.0, 420.0);
    let (left, right, top, bottom) = (80.0, 220.0, 40.0, 60.0);
    let (pw, ph) = (width - left - right, height - top - bottom);
    let xs: Vec<usize> = r.plan.steps.iter().map(|&s| step_cpu_count(r, s)).collect();
    let xmax = *xs.iter().max().unwrap_or(&1) as f64;
    let ymax = nice_ceiling(
        r.rows
            .iter()
            .filter(|x| x.workload == w)
            .map(|x| x.rps)
            .fold(0.0, f64::max)
            .max(1.0)
            * 1.05,
    );
    let x = |cpus: f64| {
        left + if xmax > 1.0 {
            (cpus - 1.0) / (xmax - 1.0) * pw
        } else {
            pw / 2.0
        }
    };
    let y = |rps: f64| top + ph - rps / ymax * ph;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">espalier scale: {} workload</text>\n",
        left + pw / 2.0,
        w.name()
    );
    // Axes, ticks and grid.
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>",
        top + ph,
        left + pw,
        top + ph
    );
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>",
        top + ph
    );
    for k in 0..=5 {
        let v = ymax * k as f64 / 5.0;
        let yy = y(v);
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" y1=\"{yy:.1}\" x2=\"{}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/>",
            left + pw
        );
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 6.0,
            yy + 4.0,
            thousands(v)
        );
    }
    for &c in &xs {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{c}</text>",
            x(c as f64),
            top + ph + 18.0
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">server CPUs</text>",
        left + pw / 2.0,
        height - 18.0
    );
    let _ = writeln!(
        s,
        "<text transform=\"translate(20 {}) rotate(-90)\" text-anchor=\"middle\">requests/s</text>",
        top + ph / 2.0
    );
    for (i, c) in configurations(r).into_iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<(f64, f64)> = r
            .plan
            .steps
            .iter()
            .filter_map(|&st| {
                rps_of(&r.rows, w, c, st).map(|row| (x(row.cpu_count as f64), y(row.rps)))
            })
            .collect();
        let path: Vec<String> = points
            .iter()
            .map(|(a, b)| format!("{a:.1},{b:.1}"))
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2.5\" points=\"{}\"/>",
            path.join(" ")
        );
        for (a, b) in &points {
            let _ = writeln!(
                s,
                "<circle cx=\"{a:.1}\" cy=\"{b:.1}\" r=\"4\" fill=\"{color}\"/>"
            );
        }
        let ly = top + 20.0 + i as f64 * 22.0;
        let _ = writeln!(s, "<line x1=\"{}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{color}\" stroke-width=\"2.5\"/>", left + pw + 16.0, left + pw + 40.0);
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\">{}</text>",
            left + pw + 46.0,
            ly + 4.0,
            c.title().split(" (").next().unwrap_or("")
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The smallest 1, 2, 2.5 or 5 × 10ⁿ at or above `v`, so axis ticks are round numbers.
fn nice_ceiling(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|&c| c >= v)
        .unwrap_or(10.0 * p)
}

fn html_escape(s: &str) -> String {
    let mut out = Vec::new();
    crate::handlers::dynamic::escape_html(s, &mut out);
    String::from_utf8(out).expect("escaping keeps UTF-8")
}

fn html_table(header: &[String], body: &[Vec<String>]) -> String {
    let mut out = String::from("<table>\n<tr>");
    for h in header {
        let _ = write!(out, "<th>{}</th>", html_escape(h));
    }
    out.push_str("</tr>\n");
    for row in body {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let _ = write!(
                out,
                "<{t}>{}</{t}>",
                html_escape(cell),
                t = if i == 0 { "th" } else { "td" }
            );
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out
}

pub fn html(r: &ScaleResults) -> String {
    let mut out = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>espalier scale</title>\n\
         <style>body{{font-family:system-ui,sans-serif;max-width:60em;margin:2em auto;line-height:1.45}}table{{border-collapse:collapse;margin:1em 0}}\
         td,th{{border:1px solid #ccc;padding:.3em .7em}}td{{text-align:right}}th{{text-align:left}}</style></head><body>\n\
         <h1>espalier scale</h1>\n<p>{}</p>\n<p>{}</p>\n",
        html_escape(&r.date),
        html_escape(&setup_text(r)).replace("**", "")
    );
    for w in workloads(r) {
        let (h, b) = table(r, w);
        let _ = write!(
            out,
            "<h2>{} workload</h2>\n{}\n{}\n",
            w.name(),
            html_table(&h, &b),
            svg(r, w)
        );
    }
    if let Some(i) = &r.isolation {
        let header: Vec<String> = [
            "pool B latency",
            "p50 ms",
            "p99 ms",
            "max ms",
            "pool A requests/s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let rows = vec![
            vec![
                "without the mask".into(),
                format!("{:.2}", i.pool_b_unmasked.p50),
                format!("{:.2}", i.pool_b_unmasked.p99),
                format!("{:.2}", i.pool_b_unmasked.max),
                format!("{:.0}", i.pool_a_rps_unmasked),
            ],
            vec![
                "with the mask".into(),
                format!("{:.2}", i.pool_b_masked.p50),
                format!("{:.2}", i.pool_b_masked.p99),
                format!("{:.2}", i.pool_b_masked.max),
                format!("{:.0}", i.pool_a_rps_masked),
            ],
        ];
        let _ = write!(
            out,
            "<h2>Isolation</h2>\n<p>Pool A saturated with CPU-heavy requests; pool B receives {} requests/s; with the mask A runs on CPUs {} and B alone on CPU {}.</p>\n{}",
            i.pool_b_rate,
            html_escape(&i.pool_a_cpus_masked),
            html_escape(&i.pool_b_cpus_masked),
            html_table(&header, &rows)
        );
    }
    let header: Vec<String> = [
        "configuration",
        "20 → 40 cores",
        "40 → 80 cores",
        "hyper-threading on",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let rows: Vec<Vec<String>> = CASE_STUDY
        .iter()
        .map(|(a, b, c, d)| vec![a.to_string(), b.to_string(), c.to_string(), d.to_string()])
        .collect();
    let _ = write!(out, "<h2>The case study, for reference</h2>\n<p>IIS 8.0 on an HP DL980 G7 (8 sockets × 10 cores); 20 cores = baseline.</p>\n{}", html_table(&header, &rows));
    out.push_str("</body></html>\n");
    out
}

/// Writes results.json, report.md, chart-WORKLOAD.svg (and chart.svg, the first workload's)
/// and report.html into `dir`.
pub fn write_all(r: &ScaleResults, dir: &Path) -> Result<(), String> {
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text)
            .map_err(|e| format!("{}: {e}", dir.join(name).display()))
    };
    write(
        "results.json",
        &serde_json::to_string_pretty(r).map_err(|e| e.to_string())?,
    )?;
    write("report.md", &markdown(r))?;
    for (i, w) in workloads(r).into_iter().enumerate() {
        let chart = svg(r, w);
        write(&format!("chart-{}.svg", w.name()), &chart)?;
        if i == 0 {
            write("chart.svg", &chart)?;
        }
    }
    write("report.html", &html(r))?;
    Ok(())
}
