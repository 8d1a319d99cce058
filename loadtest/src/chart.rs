//! Line charts over time as SVG text, drawn with `plotters`' SVG backend.
//!
//! Only the SVG backend is built, without font libraries: text goes into the
//! SVG as `<text>` elements that the browser lays out, and plotters sizes
//! label areas from a per-character estimate, so fixed label areas and a
//! separate legend column keep text from overlapping the plot. What the
//! lines mean is `html.rs`'s business.

use std::ops::Range;

use anyhow::anyhow;
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Canvas size, pixels: wide enough for hours of 1 s points to stay legible.
const WIDTH_PX: u32 = 1000;
const HEIGHT_PX: u32 = 340;
/// The legend column on the right, wide enough for `protocol:*` error keys.
const LEGEND_WIDTH_PX: u32 = 250;
/// Vertical distance between legend entries.
const LEGEND_ROW_PX: i32 = 20;
/// Points drawn per line at most; longer series are grouped (see [`thin`]).
/// More would not show at this width and would only bloat the page.
pub(crate) const MAX_DRAWN_POINTS: usize = 1500;
const FONT: &str = "sans-serif";
/// Font sizes as plotters takes them; its SVG backend writes them divided
/// by 1.24, so these come out as 17, 13.7, 12 and 12.9 px.
const TITLE_SIZE: u32 = 21;
const AXIS_DESC_SIZE: u32 = 17;
const LABEL_SIZE: u32 = 15;
const LEGEND_SIZE: u32 = 16;

/// Colour-blind-safe palette (Tableau 10); entries repeat beyond ten lines.
pub(crate) const PALETTE: [RGBColor; 10] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xba, 0xb0, 0xac),
];

/// How the y axis maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scale {
    /// From 0.
    Linear,
    /// Logarithmic: latencies of different kinds span orders of magnitude.
    Log,
}

/// How consecutive points are combined when a line has too many to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Merge {
    /// Rates and levels: the group's average.
    Mean,
    /// Latencies and memory: the group's worst, so no spike disappears.
    Max,
}

/// One line of a chart.
#[derive(Debug, Clone)]
pub(crate) struct Line {
    pub(crate) label: String,
    pub(crate) color: RGBColor,
    /// Drawn thicker: a total beside its parts.
    pub(crate) bold: bool,
    /// (seconds since the start, value); `None` where the interval had no
    /// value (no operation of that kind), drawn as a gap.
    pub(crate) points: Vec<(f64, Option<f64>)>,
    pub(crate) merge: Merge,
}

/// A chart: lines over time sharing one y axis.
#[derive(Debug, Clone)]
pub(crate) struct Chart {
    pub(crate) title: String,
    /// Axis description with its unit.
    pub(crate) y_desc: String,
    pub(crate) scale: Scale,
    pub(crate) lines: Vec<Line>,
}

impl Chart {
    /// The chart as an SVG element for inlining into HTML.
    ///
    /// # Errors
    /// Drawing failed (it writes to a `String`, so only on a plotters bug).
    pub(crate) fn to_svg(&self) -> anyhow::Result<String> {
        let lines: Vec<Line> = self.lines.iter().map(thin).collect();
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
            root.fill(&WHITE).map_err(draw_error)?;
            let (plot, legend) = root.split_horizontally(WIDTH_PX - LEGEND_WIDTH_PX);
            let x = 0.0..x_end(&lines);
            match self.scale {
                Scale::Linear => self.plot(&plot, &lines, x, 0.0..linear_top(&lines))?,
                Scale::Log => self.plot(&plot, &lines, x, log_range(&lines).log_scale())?,
            }
            draw_legend(&legend, &lines)?;
            root.present().map_err(draw_error)?;
        }
        // Inline SVG in HTML needs no namespace declaration, and leaving it
        // out keeps the page free of any URL.
        Ok(svg.replacen(r#" xmlns="http://www.w3.org/2000/svg""#, "", 1))
    }

    /// Axes, grid and lines in `area`.
    fn plot<Y>(
        &self,
        area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
        lines: &[Line],
        x: Range<f64>,
        y: Y,
    ) -> anyhow::Result<()>
    where
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let mut chart = ChartBuilder::on(area)
            .caption(&self.title, (FONT, TITLE_SIZE))
            .margin(8)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d::<Range<f64>, Y>(x, y)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .x_desc("time since start (s)")
            .y_desc(&self.y_desc)
            .axis_desc_style((FONT, AXIS_DESC_SIZE))
            .label_style((FONT, LABEL_SIZE))
            .x_label_formatter(&|v| short_number(*v))
            .y_label_formatter(&|v| short_number(*v))
            .light_line_style(WHITE.mix(0.0))
            .bold_line_style(BLACK.mix(0.12))
            .draw()
            .map_err(draw_error)?;
        // Totals first, so that a part equal to its total stays visible on top.
        let totals_first = lines.iter().filter(|l| l.bold);
        for line in totals_first.chain(lines.iter().filter(|l| !l.bold)) {
            let width = if line.bold { 3 } else { 2 };
            let style = line.color.stroke_width(width);
            for segment in segments(&line.points) {
                if let [single] = segment[..] {
                    // A lone value between gaps would be an invisible line.
                    chart
                        .draw_series(std::iter::once(Circle::new(single, 3, line.color.filled())))
                        .map_err(draw_error)?;
                } else {
                    chart
                        .draw_series(LineSeries::new(segment, style))
                        .map_err(draw_error)?;
                }
            }
        }
        Ok(())
    }
}

/// A legend column: one swatch and label per line, top to bottom.
fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    lines: &[Line],
) -> anyhow::Result<()> {
    let text = TextStyle::from((FONT, LEGEND_SIZE)).pos(Pos::new(HPos::Left, VPos::Center));
    let mut y = 44;
    for line in lines {
        let width = if line.bold { 3 } else { 2 };
        area.draw(&PathElement::new(
            vec![(8, y), (32, y)],
            line.color.stroke_width(width),
        ))
        .map_err(draw_error)?;
        area.draw(&Text::new(line.label.clone(), (40, y), text.clone()))
            .map_err(draw_error)?;
        y += LEGEND_ROW_PX;
    }
    Ok(())
}

/// How many consecutive points [`thin`] groups into one for `len` points.
pub(crate) fn group_size(len: usize) -> usize {
    len.div_ceil(MAX_DRAWN_POINTS).max(1)
}

/// The line with at most [`MAX_DRAWN_POINTS`] points: consecutive points
/// grouped by [`group_size`], each group drawn at its last time with its
/// values merged by the line's [`Merge`].
fn thin(line: &Line) -> Line {
    let group = group_size(line.points.len());
    if group == 1 {
        return line.clone();
    }
    let points = line
        .points
        .chunks(group)
        .filter_map(|chunk| {
            let t = chunk.last()?.0;
            let values: Vec<f64> = chunk.iter().filter_map(|p| p.1).collect();
            let merged = match (values.is_empty(), line.merge) {
                (true, _) => None,
                (false, Merge::Mean) => Some(values.iter().sum::<f64>() / values.len() as f64),
                (false, Merge::Max) => values.iter().copied().reduce(f64::max),
            };
            Some((t, merged))
        })
        .collect();
    Line {
        points,
        ..line.clone()
    }
}

/// Runs of consecutive values, split at gaps.
fn segments(points: &[(f64, Option<f64>)]) -> Vec<Vec<(f64, f64)>> {
    let mut out = Vec::new();
    let mut current = Vec::new();
    for &(t, value) in points {
        match value {
            Some(v) => current.push((t, v)),
            None if !current.is_empty() => out.push(std::mem::take(&mut current)),
            None => {}
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

fn values(lines: &[Line]) -> impl Iterator<Item = f64> + '_ {
    lines
        .iter()
        .flat_map(|l| l.points.iter().filter_map(|p| p.1))
        .filter(|v| v.is_finite())
}

/// The last time of any line (at least 1 s, so an empty chart has an axis).
fn x_end(lines: &[Line]) -> f64 {
    lines
        .iter()
        .filter_map(|l| l.points.last().map(|p| p.0))
        .fold(1.0, f64::max)
}

/// Top of a linear axis: 10 % above the largest value (1 when all are 0).
fn linear_top(lines: &[Line]) -> f64 {
    let max = values(lines).fold(0.0, f64::max);
    if max > 0.0 { max * 1.1 } else { 1.0 }
}

/// A log axis around the positive values, widened to whole decades (and a
/// hair more: plotters finds decade ticks through `ln`, whose rounding
/// would otherwise drop the ones at the very ends).
fn log_range(lines: &[Line]) -> Range<f64> {
    let positive = || values(lines).filter(|v| *v > 0.0);
    let min = positive().fold(f64::INFINITY, f64::min);
    let max = positive().fold(0.0, f64::max);
    if !min.is_finite() {
        return 0.1..10.0;
    }
    let low = 10f64.powf(min.log10().floor());
    let high = 10f64.powf(max.log10().ceil()).max(low * 10.0);
    low * 0.999..high * 1.001
}

/// Axis labels: `0.25`, `2`, `12.5`, `3.4k`, `1.2M`: three significant
/// digits at most, no trailing zeros.
fn short_number(v: f64) -> String {
    let (scaled, suffix) = match v.abs() {
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let decimals = match scaled.abs() {
        a if a >= 100.0 => 0,
        a if a >= 10.0 => 1,
        a if a >= 1.0 => 2,
        _ => 3,
    };
    let text = format!("{scaled:.decimals$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        &text
    };
    format!("{text}{suffix}")
}

fn draw_error<E: std::fmt::Display>(err: E) -> anyhow::Error {
    anyhow!("drawing a chart: {err}")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn line(points: Vec<(f64, Option<f64>)>, merge: Merge) -> Line {
        Line {
            label: "x".to_owned(),
            color: PALETTE[0],
            bold: false,
            points,
            merge,
        }
    }

    /// How the SVG backend writes a text element's content.
    pub(crate) fn svg_text(text: &str) -> String {
        format!(">\n{text}\n</text>")
    }

    #[test]
    fn gaps_split_lines() {
        let points = [
            (1.0, Some(1.0)),
            (2.0, Some(2.0)),
            (3.0, None),
            (4.0, Some(4.0)),
            (5.0, None),
        ];
        assert_eq!(
            segments(&points),
            [vec![(1.0, 1.0), (2.0, 2.0)], vec![(4.0, 4.0)]]
        );
    }

    #[test]
    fn long_lines_are_grouped_keeping_spikes() {
        let n = MAX_DRAWN_POINTS * 2 + 1;
        let mut points: Vec<_> = (0..n).map(|i| (i as f64, Some(1.0))).collect();
        points[10].1 = Some(100.0);
        let max = thin(&line(points.clone(), Merge::Max));
        assert!(max.points.len() <= MAX_DRAWN_POINTS);
        assert_eq!(max.points[3], (11.0, Some(100.0)));
        let mean = thin(&line(points, Merge::Mean));
        assert_eq!(mean.points[3], (11.0, Some(34.0)));
        let short = line(vec![(1.0, Some(1.0))], Merge::Max);
        assert_eq!(thin(&short).points, short.points);
    }

    #[test]
    fn svg_has_title_axes_legend_and_no_namespace_url() {
        let chart = Chart {
            title: "Throughput".to_owned(),
            y_desc: "operations / s".to_owned(),
            scale: Scale::Log,
            lines: vec![line(
                vec![(1.0, Some(0.5)), (2.0, Some(250.0))],
                Merge::Mean,
            )],
        };
        let svg = chart.to_svg().unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in ["Throughput", "operations / s", "time since start (s)", "x"] {
            assert!(svg.contains(&svg_text(text)), "{text} missing");
        }
        assert!(svg.contains("<polyline"), "no line drawn");
        assert!(!svg.contains("http"));
        let range = log_range(&chart.lines);
        assert!((0.0999..0.1).contains(&range.start), "{range:?}");
        assert!((1000.0..1001.0).contains(&range.end), "{range:?}");
        // Both end decades get a tick label.
        assert!(svg.contains(&svg_text("0.1")) && svg.contains(&svg_text("1k")));
    }

    #[test]
    fn axis_labels_are_short() {
        assert_eq!(short_number(0.0), "0");
        assert_eq!(short_number(0.25), "0.25");
        assert_eq!(short_number(0.999_999), "1");
        assert_eq!(short_number(2.0), "2");
        assert_eq!(short_number(2.5), "2.5");
        assert_eq!(short_number(12.34), "12.3");
        assert_eq!(short_number(1500.0), "1.5k");
        assert_eq!(short_number(25_000.0), "25k");
        assert_eq!(short_number(3_000_000.0), "3M");
    }
}
