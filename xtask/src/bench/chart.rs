//! `docs/bench-per-call.svg`: one horizontal bar per way of recording,
//! its median ns per call on a log scale.

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::{
    prelude::*,
    style::text_anchor::{HPos, Pos, VPos},
};

use super::report::ns;

/// Librip's rows in one colour, the peers in another, the baseline grey.
fn colour(id: &str) -> RGBColor {
    match id {
        "none" => RGBColor(150, 150, 150),
        id if id.starts_with("snap") => RGBColor(31, 119, 180),
        _ => RGBColor(214, 96, 77),
    }
}

/// Draws `bars` (id, label, median ns) to an SVG file at `path`.
pub fn draw(path: &Path, bars: &[(&str, &str, f64)]) -> Result<()> {
    if bars.is_empty() {
        return Err(anyhow!("no row has a result to chart"));
    }
    let max = bars.iter().map(|b| b.2).fold(1.0, f64::max);
    let min = bars.iter().map(|b| b.2).fold(f64::INFINITY, f64::min);
    let lo = 10f64.powf(min.max(0.1).log10().floor());
    let hi = 10f64.powf((max * 3.0).log10().ceil());
    let n = bars.len();
    let height = 80 + 34 * n as u32;
    let root = SVGBackend::new(path, (960, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Recording that f ran: ns per call (log scale, lower is better)",
            ("sans-serif", 18),
        )
        .margin(12)
        .margin_right(48)
        .x_label_area_size(36)
        .y_label_area_size(300)
        .build_cartesian_2d((lo..hi).log_scale(), (0..n - 1).into_segmented())
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => n
                .checked_sub(i + 1)
                .and_then(|k| bars.get(k))
                .map_or(String::new(), |b| b.1.into()),
            _ => String::new(),
        })
        .x_desc("ns per call (median)")
        .x_label_formatter(&|v| {
            if *v >= 1.0 {
                super::stats::thousands(v.round() as u64)
            } else {
                format!("{v}")
            }
        })
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    // The first row at the top.
    let rects = bars.iter().enumerate().map(|(k, (id, _, v))| {
        let i = n - 1 - k;
        let mut r = Rectangle::new(
            [
                (lo, SegmentValue::Exact(i)),
                (*v, SegmentValue::Exact(i + 1)),
            ],
            colour(id).filled(),
        );
        r.set_margin(5, 5, 0, 0);
        r
    });
    chart.draw_series(rects).map_err(|e| anyhow!("{e}"))?;
    let labels = bars.iter().enumerate().map(|(k, (_, _, v))| {
        Text::new(
            format!(" {} ns", ns(*v)),
            (*v, SegmentValue::CenterOf(n - 1 - k)),
            TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Left, VPos::Center)),
        )
    });
    chart.draw_series(labels).map_err(|e| anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_an_svg() {
        let dir = std::env::temp_dir().join(format!("rip-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.svg");
        draw(
            &p,
            &[
                ("none", "no tracing", 2.0),
                ("snap-c", "librip snap", 2.5),
                ("gdb", "gdb breakpoint", 150_000.0),
            ],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(
            svg.contains("librip snap") && svg.contains("150,000 ns"),
            "{svg}"
        );
        assert!(draw(&p, &[]).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
