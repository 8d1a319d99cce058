//! The HTML report: one self-contained page (inline CSS and SVG, nothing
//! fetched, no script) with the run's parameters, the summary tables and
//! charts over time. It reads a finished [`Report`]; the charts themselves
//! are drawn by `chart.rs`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use plotters::style::{BLACK, RGBColor};

use crate::chart::{Chart, Line, Merge, PALETTE, Scale, group_size};
use crate::report::{Report, mib};
use crate::series::{IntervalOp, Percentiles, Point, Series};

/// Picks one percentile out of an interval's.
type PercentileOf = fn(&Percentiles) -> f64;

/// Error keys drawn as their own line; the rest are summed as `other`.
const MAX_ERROR_LINES: usize = 7;

const STYLE: &str = "
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1040px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25em 0.7em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
tr.total td { font-weight: bold; }
tr.violation td { color: #b00; }
pre { background: #f4f4f4; padding: 0.6em; white-space: pre-wrap; word-break: break-all; }
.verdict { font-weight: bold; padding: 0.4em 0.7em; display: inline-block; }
.good { background: #e3f3e0; } .bad { background: #fbe0e0; }
figure { margin: 1em 0; } figcaption { color: #555; font-size: 0.9em; }
svg { max-width: 100%; height: auto; }
";

/// Writes the page for `report` to `path`.
///
/// # Errors
/// Drawing a chart or writing the file failed.
pub(crate) fn write(report: &Report, path: &Path) -> anyhow::Result<()> {
    let page = render(report)?;
    std::fs::write(path, page).with_context(|| format!("writing {}", path.display()))
}

/// The page as text.
///
/// # Errors
/// Drawing a chart failed.
pub(crate) fn render(report: &Report) -> anyhow::Result<String> {
    let mut page = String::new();
    head(&mut page, report)?;
    run_section(&mut page, report)?;
    operations_section(&mut page, report)?;
    thresholds_section(&mut page, report)?;
    errors_section(&mut page, report)?;
    rss_section(&mut page, report)?;
    charts_section(&mut page, &report.series)?;
    page.push_str("</body>\n</html>\n");
    Ok(page)
}

fn head(page: &mut String, report: &Report) -> std::fmt::Result {
    writeln!(page, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>")?;
    writeln!(page, "<meta charset=\"utf-8\">")?;
    writeln!(
        page,
        "<title>mcp-loadtest: {} ({} sessions)</title>",
        escape(&report.scenario),
        report.sessions
    )?;
    writeln!(page, "<style>{STYLE}</style>\n</head>\n<body>")?;
    writeln!(page, "<h1>mcp-loadtest report</h1>")?;
    let (class, verdict) = match report.protocol_violations {
        0 => ("good", "No protocol violations.".to_owned()),
        n => ("bad", format!("{n} protocol violations.")),
    };
    writeln!(page, "<p class=\"verdict {class}\">{verdict}</p>")
}

fn run_section(page: &mut String, report: &Report) -> std::fmt::Result {
    writeln!(page, "<section id=\"run\">\n<h2>Run</h2>\n<table>")?;
    let series = &report.series;
    let rows = [
        ("target", escape(&report.url)),
        ("scenario", escape(&report.scenario)),
        ("sessions", report.sessions.to_string()),
        ("duration", format!("{} s", report.duration_secs)),
        ("ramp-up", format!("{} s", report.ramp_up_secs)),
        (
            "in flight per session",
            report.concurrency_per_session.to_string(),
        ),
        ("elapsed", format!("{:.1} s", report.elapsed_secs)),
        (
            "sessions aborted at the hard deadline",
            report.unfinished_sessions.to_string(),
        ),
        (
            "time series",
            format!(
                "{} intervals of {} ms ({} left out)",
                series.points.len(),
                series.interval_ms,
                series.dropped_points
            ),
        ),
    ];
    for (name, value) in rows {
        writeln!(page, "<tr><td>{name}</td><td>{value}</td></tr>")?;
    }
    writeln!(page, "</table>\n<p>Command:</p>")?;
    writeln!(page, "<pre>{}</pre>\n</section>", escape(&report.command))
}

fn operations_section(page: &mut String, report: &Report) -> std::fmt::Result {
    writeln!(page, "<section id=\"operations\">\n<h2>Operations</h2>")?;
    writeln!(
        page,
        "<table>\n<tr><th>operation</th><th>count</th><th>ok</th><th>failed</th>\
         <th>ok/s</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th></tr>"
    )?;
    for (name, op) in &report.operations {
        writeln!(
            page,
            "<tr><td>{name}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td>\
             <td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td></tr>",
            op.ok + op.failed,
            op.ok,
            op.failed,
            op.per_sec,
            op.p50_ms,
            op.p90_ms,
            op.p99_ms,
            op.max_ms
        )?;
    }
    writeln!(
        page,
        "<tr class=\"total\"><td>total</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td>\
         <td></td><td></td><td></td><td></td></tr>\n</table>",
        report.total_ok + report.total_failed,
        report.total_ok,
        report.total_failed,
        report.ops_per_sec
    )?;
    writeln!(
        page,
        "<p>Latency is that of successful operations; what each kind times is described \
         in <code>loadtest/README.md</code>.</p>\n</section>"
    )
}

fn thresholds_section(page: &mut String, report: &Report) -> std::fmt::Result {
    if report.thresholds.is_empty() {
        return Ok(());
    }
    writeln!(
        page,
        "<section id=\"thresholds\">\n<h2>Thresholds</h2>\n<table>\n<tr><th>threshold</th><th>the run</th><th>verdict</th></tr>"
    )?;
    for verdict in &report.thresholds {
        let (class, word) = if verdict.passed {
            ("", "passed")
        } else {
            (" class=\"violation\"", "broken")
        };
        writeln!(
            page,
            "<tr{class}><td><code>{}</code></td><td>{}</td><td>{word}</td></tr>",
            escape(&verdict.threshold),
            escape(&verdict.actual)
        )?;
    }
    writeln!(page, "</table>\n</section>")
}

fn errors_section(page: &mut String, report: &Report) -> std::fmt::Result {
    writeln!(page, "<section id=\"errors\">\n<h2>Errors</h2>")?;
    writeln!(
        page,
        "<p>Protocol violations: <b>{}</b>. Keys starting with <code>protocol:</code> \
         are violations; the others are failures (status codes, timeouts, transport).</p>",
        report.protocol_violations
    )?;
    // Always shown: against a protected server, no refusal is news too.
    writeln!(
        page,
        "<p>Refused by the server for who sent the request or how often (failures, \
         also listed below):</p>\n<table id=\"refusals\">\n<tr><th>status</th><th>count</th></tr>"
    )?;
    for (status, reason, count) in report.refusals.rows() {
        writeln!(page, "<tr><td>{status} {reason}</td><td>{count}</td></tr>")?;
    }
    writeln!(page, "</table>")?;
    if report.errors.is_empty() {
        return writeln!(page, "<p>No errors.</p>\n</section>");
    }
    writeln!(page, "<table>\n<tr><th>error</th><th>count</th></tr>")?;
    for (key, count) in &report.errors {
        let class = if key.starts_with("protocol:") {
            " class=\"violation\""
        } else {
            ""
        };
        writeln!(
            page,
            "<tr{class}><td>{}</td><td>{count}</td></tr>",
            escape(key)
        )?;
    }
    writeln!(page, "</table>")?;
    if !report.failure_samples.is_empty() {
        writeln!(
            page,
            "<p>The first answer that failed each check:</p>\n<table id=\"samples\">\n<tr><th>error</th><th>operation: result</th></tr>"
        )?;
        for (key, sample) in &report.failure_samples {
            writeln!(
                page,
                "<tr><td>{}</td><td><code>{}</code></td></tr>",
                escape(key),
                escape(sample)
            )?;
        }
        writeln!(page, "</table>")?;
    }
    writeln!(page, "</section>")
}

fn rss_section(page: &mut String, report: &Report) -> std::fmt::Result {
    let Some(rss) = &report.series.server_rss else {
        return Ok(());
    };
    writeln!(
        page,
        "<section id=\"server-rss\">\n<h2>Server memory</h2>\n<table>"
    )?;
    writeln!(
        page,
        "<tr><th>pid</th><th>start</th><th>peak</th><th>end</th></tr>"
    )?;
    writeln!(
        page,
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n</table>",
        rss.pid,
        mib(rss.start_bytes),
        mib(rss.peak_bytes),
        mib(rss.end_bytes)
    )?;
    if let Some(t) = rss.lost_at_secs {
        writeln!(
            page,
            "<p>The process could not be read from {t:.1} s on (it exited?).</p>"
        )?;
    }
    writeln!(page, "</section>")
}

fn charts_section(page: &mut String, series: &Series) -> anyhow::Result<()> {
    writeln!(page, "<section id=\"charts\">\n<h2>Over time</h2>")?;
    let group = group_size(series.points.len());
    let grouping = if group > 1 {
        format!(
            " Each drawn point stands for {group} intervals: the average for rates and \
             sessions, the maximum for latency and memory."
        )
    } else {
        String::new()
    };
    writeln!(
        page,
        "<p>One point per {} ms interval, at its end.{grouping}</p>",
        series.interval_ms
    )?;
    for (id, caption, chart) in charts(series) {
        let svg = chart.to_svg()?;
        writeln!(
            page,
            "<figure id=\"chart-{id}\">\n{svg}\n<figcaption>{caption}</figcaption>\n</figure>"
        )?;
    }
    writeln!(page, "</section>")?;
    Ok(())
}

/// (element id, caption, chart) of every chart, the RSS one only when sampled.
fn charts(series: &Series) -> Vec<(&'static str, &'static str, Chart)> {
    let mut charts = vec![
        (
            "throughput",
            "Operations that succeeded per second, per operation and in all.",
            throughput(series),
        ),
        (
            "latency-all",
            "Latency percentiles of all successful operations together, per interval.",
            latency_all(series),
        ),
        (
            "latency-p50",
            "Median latency per operation; gaps are intervals in which that operation had no success.",
            latency_by_kind(series, "p50", |p| p.p50_ms),
        ),
        (
            "latency-p99",
            "99th-percentile latency per operation; gaps are intervals in which that operation had no success.",
            latency_by_kind(series, "p99", |p| p.p99_ms),
        ),
        (
            "errors",
            "Errors per second by key (failed operations, and failures outside them such as the final DELETE).",
            errors(series),
        ),
        (
            "sessions",
            "Sessions between their first initialize and their end, at the end of each interval.",
            sessions(series),
        ),
    ];
    if series.server_rss.is_some() {
        charts.push((
            "rss",
            "Resident memory of the server process (VmRSS), at the end of each interval.",
            rss(series),
        ));
    }
    charts
}

fn throughput(series: &Series) -> Chart {
    let mut lines: Vec<Line> = kinds_seen(series)
        .into_iter()
        .map(|(kind, color)| {
            let points = series
                .points
                .iter()
                .map(|p| {
                    (
                        p.t_secs,
                        Some(find(p, kind).map_or(0.0, |op| rate(p, op.ok))),
                    )
                })
                .collect();
            line(kind, color, points, Merge::Mean)
        })
        .collect();
    let all = series
        .points
        .iter()
        .map(|p| (p.t_secs, Some(rate(p, p.all.ok))))
        .collect();
    lines.push(bold(line("all", BLACK, all, Merge::Mean)));
    Chart {
        title: "Throughput".to_owned(),
        y_desc: "successful operations / s".to_owned(),
        scale: Scale::Linear,
        lines,
    }
}

fn latency_all(series: &Series) -> Chart {
    let percentiles: [(&str, PercentileOf); 4] = [
        ("p50", |p| p.p50_ms),
        ("p90", |p| p.p90_ms),
        ("p99", |p| p.p99_ms),
        ("max", |p| p.max_ms),
    ];
    let lines = percentiles
        .iter()
        .enumerate()
        .map(|(i, (name, value))| {
            let points = series
                .points
                .iter()
                .map(|p| (p.t_secs, p.all.latency.as_ref().map(value)))
                .collect();
            line(name, PALETTE[i], points, Merge::Max)
        })
        .collect();
    Chart {
        title: "Latency, all operations".to_owned(),
        y_desc: "latency (ms, log scale)".to_owned(),
        scale: Scale::Log,
        lines,
    }
}

fn latency_by_kind(series: &Series, name: &str, value: PercentileOf) -> Chart {
    let lines = kinds_seen(series)
        .into_iter()
        .map(|(kind, color)| {
            let points = series
                .points
                .iter()
                .map(|p| {
                    let latency = find(p, kind).and_then(|op| op.latency.as_ref());
                    (p.t_secs, latency.map(value))
                })
                .collect();
            line(kind, color, points, Merge::Max)
        })
        .collect();
    Chart {
        title: format!("Latency {name} by operation"),
        y_desc: format!("{name} latency (ms, log scale)"),
        scale: Scale::Log,
        lines,
    }
}

fn errors(series: &Series) -> Chart {
    let mut totals: BTreeMap<&str, u64> = BTreeMap::new();
    for point in &series.points {
        for (key, n) in &point.errors {
            *totals.entry(key.as_str()).or_default() += n;
        }
    }
    let mut keys: Vec<(&str, u64)> = totals.into_iter().collect();
    keys.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let (shown, rest) = keys.split_at(keys.len().min(MAX_ERROR_LINES));
    let rest: Vec<&str> = rest.iter().map(|(key, _)| *key).collect();

    let error_rate = |keys: &[&str]| -> Vec<(f64, Option<f64>)> {
        series
            .points
            .iter()
            .map(|p| {
                let n: u64 = keys.iter().filter_map(|k| p.errors.get(*k)).sum();
                (p.t_secs, Some(rate(p, n)))
            })
            .collect()
    };
    let mut lines: Vec<Line> = shown
        .iter()
        .enumerate()
        .map(|(i, (key, _))| line(key, PALETTE[i], error_rate(&[key]), Merge::Mean))
        .collect();
    if !rest.is_empty() {
        lines.push(line("other", PALETTE[9], error_rate(&rest), Merge::Mean));
    }
    let all = series
        .points
        .iter()
        .map(|p| (p.t_secs, Some(rate(p, p.errors.values().sum()))))
        .collect();
    lines.push(bold(line("all errors", BLACK, all, Merge::Mean)));
    Chart {
        title: "Errors".to_owned(),
        y_desc: "errors / s".to_owned(),
        scale: Scale::Linear,
        lines,
    }
}

fn sessions(series: &Series) -> Chart {
    // The sampler starts before the first session: none are active at 0 s.
    let points = std::iter::once((0.0, Some(0.0)))
        .chain(
            series
                .points
                .iter()
                .map(|p| (p.t_secs, Some(p.active_sessions as f64))),
        )
        .collect();
    Chart {
        title: "Active sessions".to_owned(),
        y_desc: "sessions".to_owned(),
        scale: Scale::Linear,
        lines: vec![line("active sessions", PALETTE[0], points, Merge::Mean)],
    }
}

fn rss(series: &Series) -> Chart {
    let to_mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    // The reading taken before the first session starts the line at 0 s.
    let start = series
        .server_rss
        .as_ref()
        .map(|rss| (0.0, Some(to_mib(rss.start_bytes))));
    let points = start
        .into_iter()
        .chain(
            series
                .points
                .iter()
                .map(|p| (p.t_secs, p.server_rss_bytes.map(to_mib))),
        )
        .collect();
    let label = match &series.server_rss {
        Some(rss) => format!("pid {}", rss.pid),
        None => "server".to_owned(),
    };
    Chart {
        title: "Server resident memory".to_owned(),
        y_desc: "RSS (MiB)".to_owned(),
        scale: Scale::Linear,
        lines: vec![line(&label, PALETTE[2], points, Merge::Max)],
    }
}

/// Operations that ran at least once, in order of first appearance, each
/// with its colour (the same in every chart).
fn kinds_seen(series: &Series) -> Vec<(&str, RGBColor)> {
    let mut seen: Vec<&str> = Vec::new();
    for op in series.points.iter().flat_map(|p| &p.ops) {
        if !seen.contains(&op.kind.as_str()) {
            seen.push(&op.kind);
        }
    }
    seen.into_iter()
        .enumerate()
        .map(|(i, kind)| (kind, PALETTE[i % PALETTE.len()]))
        .collect()
}

fn find<'a>(point: &'a Point, kind: &str) -> Option<&'a IntervalOp> {
    point.ops.iter().find(|op| op.kind == kind)
}

/// Per second over the point's interval.
fn rate(point: &Point, count: u64) -> f64 {
    // The last interval can be very short; never divide by zero.
    count as f64 / point.dt_secs.max(1e-3)
}

fn line(label: &str, color: RGBColor, points: Vec<(f64, Option<f64>)>, merge: Merge) -> Line {
    Line {
        label: label.to_owned(),
        color,
        bold: false,
        points,
        merge,
    }
}

fn bold(line: Line) -> Line {
    Line { bold: true, ..line }
}

/// Text safe inside HTML elements and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::tests::svg_text;
    use crate::report::Refusals;
    use crate::series::RssSummary;
    use crate::stats::OpReport;

    const URL: &str = "http://127.0.0.1:18450/mcp";

    fn op(kind: &str, ok: u64, failed: u64, p50_ms: f64) -> IntervalOp {
        IntervalOp {
            kind: kind.to_owned(),
            ok,
            failed,
            latency: (ok > 0).then_some(Percentiles {
                p50_ms,
                p90_ms: p50_ms * 2.0,
                p99_ms: p50_ms * 4.0,
                max_ms: p50_ms * 8.0,
            }),
        }
    }

    fn point(t: f64, errors: &[(&str, u64)], rss: Option<u64>) -> Point {
        let ops = vec![op("echo_call", 900, 0, 1.5), op("long_call", 40, 2, 510.0)];
        Point {
            t_secs: t,
            dt_secs: 1.0,
            active_sessions: 200,
            server_rss_bytes: rss,
            all: op("all", 940, 2, 1.6),
            ops,
            errors: errors.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect(),
        }
    }

    fn report(series: Series) -> Report {
        let echo = OpReport {
            ok: 9000,
            failed: 0,
            per_sec: 900.0,
            p50_ms: 1.5,
            p90_ms: 3.0,
            p99_ms: 6.0,
            max_ms: 12.0,
            mean_ms: 2.0,
        };
        Report {
            command: format!("mcp-loadtest run --url {URL} --scenario <a&b>.toml"),
            url: URL.to_owned(),
            scenario: "mixed".to_owned(),
            sessions: 200,
            duration_secs: 10,
            ramp_up_secs: 0,
            concurrency_per_session: 1,
            elapsed_secs: 10.4,
            started_unix_ms: None,
            ended_unix_ms: None,
            total_ok: 9000,
            total_failed: 3,
            ops_per_sec: 865.4,
            protocol_violations: 1,
            unfinished_sessions: 0,
            operations: BTreeMap::from([("echo_call".to_owned(), echo)]),
            histograms: BTreeMap::new(),
            errors: BTreeMap::from([
                ("timeout".to_owned(), 2),
                ("protocol:wrong_id".to_owned(), 1),
                ("refused:401_unauthorized".to_owned(), 4),
            ]),
            refusals: Refusals {
                unauthorized_401: 4,
                ..Refusals::default()
            },
            error_window: crate::failures::ErrorWindow::default(),
            retry: crate::failures::Retry::default(),
            lost_responses: 2,
            arrivals: None,
            generator: None,
            tasks_answered_at_once: 0,
            failure_samples: BTreeMap::from([(
                "check:equals".to_owned(),
                "call_tool:add: {\"sum\":<5>}".to_owned(),
            )]),
            thresholds: vec![crate::threshold::Verdict {
                threshold: "p99<5ms".to_owned(),
                passed: false,
                actual: "6.000ms".to_owned(),
            }],
            series,
        }
    }

    fn series(rss: bool) -> Series {
        let bytes = rss.then_some(80 * 1024 * 1024);
        Series {
            interval_ms: 1000,
            points: vec![
                point(1.0, &[], bytes),
                point(2.0, &[("timeout", 2), ("protocol:wrong_id", 1)], bytes),
                point(3.0, &[], bytes),
            ],
            dropped_points: 0,
            server_rss: rss.then_some(RssSummary {
                pid: 4242,
                start_bytes: 10 * 1024 * 1024,
                peak_bytes: 80 * 1024 * 1024,
                end_bytes: 80 * 1024 * 1024,
                lost_at_secs: None,
            }),
        }
    }

    /// The `<figure>` element with this id.
    fn figure<'a>(page: &'a str, id: &str) -> &'a str {
        let start = page
            .find(&format!("<figure id=\"chart-{id}\">"))
            .unwrap_or_else(|| panic!("no chart {id}"));
        let end = start + page[start..].find("</figure>").unwrap();
        &page[start..end]
    }

    #[test]
    fn page_has_sections_tables_and_charts() {
        let page = render(&report(series(true))).unwrap();
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.trim_end().ends_with("</html>"));
        for id in [
            "run",
            "operations",
            "thresholds",
            "errors",
            "server-rss",
            "charts",
        ] {
            assert!(page.contains(&format!("<section id=\"{id}\">")), "{id}");
        }
        assert!(page.contains("<td>echo_call</td><td>9000</td><td>9000</td><td>0</td>"));
        assert!(page.contains("<tr class=\"violation\"><td>protocol:wrong_id</td><td>1</td>"));
        assert!(page.contains("1 protocol violations."));
        assert!(page.contains(
            "<tr><td>check:equals</td><td><code>call_tool:add: {&quot;sum&quot;:&lt;5&gt;}</code></td></tr>"
        ));
        assert!(page.contains(
            "<tr class=\"violation\"><td><code>p99&lt;5ms</code></td><td>6.000ms</td><td>broken</td></tr>"
        ));
        // Refusals: a table of their own, and failures among the errors.
        assert!(page.contains("<table id=\"refusals\">"));
        assert!(page.contains("<tr><td>401 Unauthorized</td><td>4</td></tr>"));
        assert!(page.contains("<tr><td>429 Too Many Requests</td><td>0</td></tr>"));
        assert!(page.contains("<tr><td>refused:401_unauthorized</td><td>4</td></tr>"));
        assert!(page.contains("<td>80.0 MiB</td>"));

        let throughput = figure(&page, "throughput");
        assert!(throughput.contains("<svg"));
        let has = |id: &str, label: &str| figure(&page, id).contains(&svg_text(label));
        for label in [
            "Throughput",
            "echo_call",
            "long_call",
            "all",
            "successful operations / s",
        ] {
            assert!(has("throughput", label), "{label}");
        }
        assert!(has("latency-p99", "long_call"));
        assert!(has("latency-p99", "p99 latency (ms, log scale)"));
        for label in ["p50", "p90", "p99", "max"] {
            assert!(has("latency-all", label), "{label}");
        }
        assert!(has("errors", "timeout") && has("errors", "protocol:wrong_id"));
        assert!(has("sessions", "Active sessions"));
        assert!(has("rss", "RSS (MiB)") && has("rss", "pid 4242"));
    }

    #[test]
    fn page_fetches_nothing() {
        let page = render(&report(series(true))).unwrap();
        for external in ["<script", "src=", "href=", "<link", "@import", "url("] {
            assert!(!page.contains(external), "{external}");
        }
        // The only URL is the target's, shown as text.
        assert!(page.matches(URL).count() >= 2);
        assert!(!page.replace(URL, "").contains("http"));
    }

    #[test]
    fn command_line_is_escaped() {
        let page = render(&report(series(false))).unwrap();
        assert!(page.contains("--scenario &lt;a&amp;b&gt;.toml"));
        assert!(!page.contains("<a&b>"));
    }

    #[test]
    fn rss_chart_and_table_only_when_sampled() {
        let page = render(&report(series(false))).unwrap();
        assert!(!page.contains("chart-rss"));
        assert!(!page.contains("server-rss"));
        assert!(page.contains("chart-sessions"));
    }

    #[test]
    fn rates_use_the_interval_length() {
        let mut series = series(false);
        series.points[2].dt_secs = 0.5;
        let chart = throughput(&series);
        let all = chart.lines.iter().find(|l| l.label == "all").unwrap();
        assert_eq!(all.points[2], (3.0, Some(1880.0)));
        let errors = errors(&series);
        let timeout = errors.lines.iter().find(|l| l.label == "timeout").unwrap();
        assert_eq!(timeout.points[..2], [(1.0, Some(0.0)), (2.0, Some(2.0))]);
    }

    #[test]
    fn rss_line_starts_with_the_reading_before_the_run() {
        let chart = rss(&series(true));
        assert_eq!(chart.lines[0].points[0], (0.0, Some(10.0)));
        assert_eq!(chart.lines[0].points[1], (1.0, Some(80.0)));
    }
}
