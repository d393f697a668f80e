//! `rip-probe leaks --timeline FILE`: the report's series as an SVG a
//! person reads — what was acquired in the window and not yet released
//! (heap and mapped bytes, descriptors), and how fast the process called
//! its allocator, over the window, in panels that share the time axis.
//!
//! Each panel is a `<g class="panel">` whose `data-max` is its axis' top
//! value (a round number at least the largest point); each series is a
//! `<polyline class="series">` named by `data-series`, one vertex per
//! point of the report's series: x is the point's time over the window,
//! y its value over `data-max`. What is outstanding was acquired in the
//! window, so it is 0 when the window begins: those lines start with a
//! vertex at the origin (`data-origin="1"`), before the points. A panel of a part not traced (the heap
//! with `--no-heap`) is left out rather than drawn flat.

use std::io::{self, Write};

use super::{bytes, offcpu::xml_safe};
use crate::{
    model::leaks::{LeakPoint, LeaksReport},
    util::timefmt::duration,
};

/// The picture's width, px.
const WIDTH: f64 = 960.0;
/// Left margin (the axis' labels), px.
const LEFT: f64 = 90.0;
/// Right margin, px.
const RIGHT: f64 = 150.0;
/// One panel's plot height, px.
const PLOT: f64 = 140.0;
/// Space above a plot (its title), px.
const ABOVE: f64 = 36.0;
/// Space below a plot (the time labels), px.
const BELOW: f64 = 26.0;
/// Space above the first panel (the picture's title), px.
const HEAD: f64 = 48.0;
/// The series' colours, in order within a panel.
const COLOURS: [&str; 2] = ["#c0392b", "#2471a3"];

/// One line of a panel.
struct Line {
    /// Its name in `data-series` (a JSON field of the series' points).
    id: &'static str,
    /// Its name in the legend.
    label: &'static str,
    /// Its value at each point.
    values: Vec<f64>,
}

/// One panel: lines sharing a vertical axis.
struct Panel {
    /// Its name in `id`.
    id: &'static str,
    title: &'static str,
    /// A value as the axis labels it.
    unit: fn(f64) -> String,
    lines: Vec<Line>,
}

/// The smallest of 1, 2, 2.5, 5 times a power of ten that is at least
/// `v` (1 for nothing): the axis' top.
fn round_up(v: f64) -> f64 {
    if v <= 1.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&t| t >= v)
        .unwrap_or(10.0 * p)
}

/// The allocator calls per second over each point's interval (since the
/// previous point; the first since the window began).
fn call_rates(points: &[LeakPoint]) -> Vec<f64> {
    let mut last = 0;
    points
        .iter()
        .map(|p| {
            let dt = p.at_ns.saturating_sub(last);
            last = p.at_ns;
            if dt == 0 {
                0.0
            } else {
                p.heap_calls as f64 * 1e9 / dt as f64
            }
        })
        .collect()
}

fn count(v: f64) -> String {
    format!("{v:.0}")
}

fn byte_count(v: f64) -> String {
    bytes(v as u64)
}

fn rate(v: f64) -> String {
    format!("{v:.0}/s")
}

/// The panels `r` has something to draw in.
fn panels(r: &LeaksReport) -> Vec<Panel> {
    let s = &r.series;
    let heap = r.traced.heap.is_some();
    let mut bytes_lines = Vec::new();
    if heap {
        bytes_lines.push(Line {
            id: "heap_bytes",
            label: "heap",
            values: s.iter().map(|p| p.heap_bytes as f64).collect(),
        });
    }
    if r.traced.mappings {
        bytes_lines.push(Line {
            id: "mapped_bytes",
            label: "mapped",
            values: s.iter().map(|p| p.mapped_bytes as f64).collect(),
        });
    }
    let mut out = Vec::new();
    if !bytes_lines.is_empty() {
        out.push(Panel {
            id: "bytes",
            title: "Bytes outstanding (acquired in the window, not yet released)",
            unit: byte_count,
            lines: bytes_lines,
        });
    }
    let mut held = Vec::new();
    if r.traced.descriptors {
        held.push(Line {
            id: "descriptors",
            label: "descriptors",
            values: s.iter().map(|p| p.descriptors as f64).collect(),
        });
    }
    if heap {
        held.push(Line {
            id: "heap_count",
            label: "heap blocks",
            values: s.iter().map(|p| p.heap_count as f64).collect(),
        });
    }
    if !held.is_empty() {
        out.push(Panel {
            id: "held",
            title: "Descriptors and heap blocks outstanding",
            unit: count,
            lines: held,
        });
    }
    if heap {
        out.push(Panel {
            id: "rate",
            title: "Allocator calls per second (allocations and frees)",
            unit: rate,
            lines: vec![Line {
                id: "heap_calls_per_s",
                label: "calls/s",
                values: call_rates(s),
            }],
        });
    }
    out
}

/// Writes `r`'s series as an SVG timeline (see the module). A report
/// without a series (the sampler's: one reading) draws its panels empty
/// and says so.
pub fn leaks_timeline(r: &LeaksReport, w: &mut dyn Write) -> io::Result<()> {
    let panels = panels(r);
    let height = HEAD + panels.len() as f64 * (ABOVE + PLOT + BELOW) + 10.0;
    let plot_w = WIDTH - LEFT - RIGHT;
    let window = r
        .window_ns
        .max(r.series.last().map_or(0, |p| p.at_ns))
        .max(1);
    let x_of = |at_ns: u64| LEFT + plot_w * at_ns as f64 / window as f64;
    let p = &r.process;
    let title = xml_text(&format!(
        "Resources over the window: {} (pid {})",
        p.comm.as_deref().unwrap_or("?"),
        p.pid
    ));
    writeln!(w, r#"<?xml version="1.0" encoding="UTF-8"?>"#)?;
    writeln!(
        w,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="Verdana, sans-serif" font-size="12" data-window-ns="{}">"#,
        r.window_ns
    )?;
    writeln!(
        w,
        r#"<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>"#
    )?;
    writeln!(
        w,
        r#"<text class="title" x="{}" y="22" text-anchor="middle" font-size="16">{title}</text>"#,
        WIDTH / 2.0
    )?;
    let sub = if r.series.len() < 2 {
        "no series: the report is one reading (librip's sampler) or the window ended at once"
            .to_string()
    } else {
        format!(
            "{} window, a point every {}; rip-probe leaks",
            duration(r.window_ns),
            duration(window / r.series.len() as u64)
        )
    };
    writeln!(
        w,
        r##"<text class="subtitle" x="{}" y="40" text-anchor="middle" fill="#555">{}</text>"##,
        WIDTH / 2.0,
        xml_text(&sub)
    )?;
    for (i, panel) in panels.iter().enumerate() {
        let top = HEAD + i as f64 * (ABOVE + PLOT + BELOW) + ABOVE;
        let bottom = top + PLOT;
        let max = round_up(
            panel
                .lines
                .iter()
                .flat_map(|l| l.values.iter().copied())
                .fold(0.0, f64::max),
        );
        writeln!(
            w,
            r#"<g class="panel" id="{}" data-max="{max}" data-top="{top}" data-bottom="{bottom}" data-left="{LEFT}" data-right="{}">"#,
            panel.id,
            LEFT + plot_w
        )?;
        writeln!(
            w,
            r#"<text class="panel-title" x="{LEFT}" y="{}" font-size="13">{}</text>"#,
            top - 10.0,
            xml_text(panel.title)
        )?;
        // The frame, a middle gridline and the axis' labels.
        writeln!(
            w,
            r##"<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{PLOT}" fill="#fafafa" stroke="#999"/>"##
        )?;
        let mid = top + PLOT / 2.0;
        writeln!(
            w,
            r##"<line x1="{LEFT}" y1="{mid}" x2="{}" y2="{mid}" stroke="#ddd"/>"##,
            LEFT + plot_w
        )?;
        for (y, v) in [(top, max), (mid, max / 2.0), (bottom, 0.0)] {
            writeln!(
                w,
                r#"<text class="y-label" x="{}" y="{}" text-anchor="end">{}</text>"#,
                LEFT - 6.0,
                y + 4.0,
                xml_text(&(panel.unit)(v))
            )?;
        }
        for (x, at) in [(LEFT, 0), (LEFT + plot_w, window)] {
            writeln!(
                w,
                r#"<text class="x-label" x="{x}" y="{}" text-anchor="middle">{}</text>"#,
                bottom + 16.0,
                duration(at)
            )?;
        }
        for (j, line) in panel.lines.iter().enumerate() {
            let colour = COLOURS[j % COLOURS.len()];
            let points: Vec<String> = r
                .series
                .iter()
                .zip(&line.values)
                .map(|(p, &v)| {
                    format!(
                        "{:.2},{:.2}",
                        x_of(p.at_ns),
                        bottom - PLOT * (v / max).clamp(0.0, 1.0)
                    )
                })
                .collect();
            // The rate has no value at the start; the others are 0 then.
            let origin = line.id != "heap_calls_per_s";
            let mut vertices = Vec::with_capacity(points.len() + 1);
            if origin {
                vertices.push(format!("{LEFT:.2},{bottom:.2}"));
            }
            vertices.extend(points);
            let last = line.values.last().copied().unwrap_or(0.0);
            writeln!(
                w,
                r#"<polyline class="series" data-series="{}" data-origin="{}" fill="none" stroke="{colour}" stroke-width="2" points="{}"><title>{}: {} at the end</title></polyline>"#,
                line.id,
                u8::from(origin),
                vertices.join(" "),
                line.label,
                xml_text(&(panel.unit)(last))
            )?;
            let ly = top + 14.0 + 18.0 * j as f64;
            writeln!(
                w,
                r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="2"/>"#,
                LEFT + plot_w + 12.0,
                LEFT + plot_w + 32.0
            )?;
            writeln!(
                w,
                r#"<text class="legend" x="{}" y="{}">{}</text>"#,
                LEFT + plot_w + 38.0,
                ly + 4.0,
                line.label
            )?;
        }
        writeln!(w, "</g>")?;
    }
    writeln!(w, "</svg>")
}

/// `s` as XML text: markup escaped, and what XML cannot hold written out.
fn xml_text(s: &str) -> String {
    xml_safe(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::leaks::{HeapTracing, tests::empty_report};

    #[test]
    fn axis_tops_are_round_and_at_least_the_largest_point() {
        assert_eq!(round_up(0.0), 1.0);
        assert_eq!(round_up(3.0), 5.0);
        assert_eq!(round_up(50_000.0), 50_000.0);
        assert_eq!(round_up(50_001.0), 100_000.0);
        assert_eq!(round_up(1_200.0), 2_000.0);
        assert_eq!(round_up(2_100.0), 2_500.0);
    }

    /// Each point is drawn at its time and value; the rate is calls over
    /// each interval; a name with markup stays text.
    #[test]
    fn points_are_drawn_at_their_time_and_value() {
        let mut r = empty_report();
        r.process.comm = Some("a<b>&c".into());
        r.window_ns = 2_000_000_000;
        r.traced.descriptors = true;
        r.traced.mappings = true;
        r.traced.heap = Some(HeapTracing::default());
        r.series = (1..=4)
            .map(|i| LeakPoint {
                at_ns: i * 500_000_000,
                heap_bytes: i * 1000,
                heap_count: i,
                descriptors: 5 - i,
                heap_calls: 100,
                ..LeakPoint::default()
            })
            .collect();
        let mut out = Vec::new();
        leaks_timeline(&r, &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        assert!(svg.contains("a&lt;b&gt;&amp;c (pid 1)"), "{svg}");
        let plot_w = WIDTH - LEFT - RIGHT;
        // The heap's bytes: 1000..4000 on an axis to 5000.
        let line = svg
            .lines()
            .find(|l| l.contains(r#"data-series="heap_bytes""#))
            .unwrap();
        let top = HEAD + ABOVE;
        let want: Vec<String> = (1..=4)
            .map(|i| {
                format!(
                    "{:.2},{:.2}",
                    LEFT + plot_w * i as f64 / 4.0,
                    top + PLOT - PLOT * (i as f64 * 1000.0 / 5000.0)
                )
            })
            .collect();
        let origin = format!("{LEFT:.2},{:.2}", top + PLOT);
        assert!(
            line.contains(&format!(r#"points="{origin} {}""#, want.join(" "))),
            "{line}"
        );
        assert!(svg.contains(r#"id="bytes" data-max="5000""#), "{svg}");
        // 100 calls every 0.5 s: 200/s, on an axis to 200.
        assert!(svg.contains(r#"id="rate" data-max="200""#), "{svg}");
        assert!(svg.contains("200/s"), "{svg}");
        // Without the heap, no heap line and no rate panel.
        r.traced.heap = None;
        let mut out = Vec::new();
        leaks_timeline(&r, &mut out).unwrap();
        let svg = String::from_utf8(out).unwrap();
        assert!(!svg.contains("heap_bytes"), "{svg}");
        assert!(!svg.contains(r#"id="rate""#), "{svg}");
        assert!(svg.contains(r#"data-series="descriptors""#), "{svg}");
    }
}
