//! The experiments' figures: line charts (either axis linear or
//! logarithmic) and grouped or stacked bar charts, with titles, axis
//! labels, legends and an optional dashed reference line, drawn as SVG by
//! `plotters`. bench-harness and brr both draw through here, so their
//! figures look alike.

use plotters::coord::combinators::IntoLogRange;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

const SIZE: (u32, u32) = (880, 440);

/// Colour-blind friendly palette (Okabe–Ito), cycled over series.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0x00, 0x72, 0xB2),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0xD5, 0x5E, 0x00),
    RGBColor(0xCC, 0x79, 0xA7),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0xF0, 0xE4, 0x42),
    RGBColor(0x00, 0x00, 0x00),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// One named line of a [`LineChart`].
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart with markers; either axis may be logarithmic.
#[derive(Clone, Debug, Default)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_log: bool,
    pub y_log: bool,
    /// Forces 0 into the y range on linear axes (ratios, fractions).
    pub y_from_zero: bool,
    /// A dashed horizontal reference line (e.g. ratio 1.0).
    pub y_reference: Option<f64>,
    pub series: Vec<Series>,
}

/// A bar chart: one group of bars per category, one bar per series in each
/// group, or one stacked bar per category when `stacked`.
#[derive(Clone, Debug, Default)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    /// (series name, one value per category; `None` leaves a gap).
    pub series: Vec<(String, Vec<Option<f64>>)>,
    pub stacked: bool,
    pub y_reference: Option<f64>,
}

/// A short tick label: 0.001, 1.5, 20, 30k, 2M.
pub fn format_tick(v: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    let a = v.abs();
    if a == 0.0 {
        "0".to_string()
    } else if a >= 1e6 {
        trim(format!("{:.2}", v / 1e6)) + "M"
    } else if a >= 1e4 {
        trim(format!("{:.2}", v / 1e3)) + "k"
    } else if a >= 1.0 {
        trim(format!("{v:.2}"))
    } else {
        trim(format!("{v:.4}"))
    }
}

/// The range of the finite values (positive ones on a log axis), widened
/// so that it is never empty: whole decades on a log axis, a 5% margin on
/// a linear one.
fn range(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        let lo = 10f64.powf(lo.log10().floor());
        let hi = 10f64.powf(hi.log10().ceil());
        (lo, if hi > lo { hi } else { lo * 10.0 })
    } else {
        let pad = if hi > lo { (hi - lo) * 0.05 } else { 1.0 };
        (if lo == 0.0 { 0.0 } else { lo - pad }, hi + pad)
    }
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn canvas<'a>(out: &'a mut String, title: &str) -> Result<Area<'a>, String> {
    let root = SVGBackend::with_string(out, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    root.titled(title, ("sans-serif", 22).into_font().style(FontStyle::Bold))
        .map_err(|e| e.to_string())
}

/// Draws the mesh, the series, the reference line and the legend on axes
/// of any kind.
fn draw_lines<X, Y>(area: &Area<'_>, chart: &LineChart, x: X, y: Y) -> Result<(), String>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let mut c = ChartBuilder::on(area)
        .margin(12)
        .margin_right(28)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x, y)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .x_label_formatter(&|v| format_tick(*v))
        .y_label_formatter(&|v| format_tick(*v))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .draw()
        .map_err(|e| err(&e))?;
    let drawable = |&(px, py): &(f64, f64)| {
        px.is_finite() && py.is_finite() && (!chart.x_log || px > 0.0) && (!chart.y_log || py > 0.0)
    };
    if let Some(r) = chart.y_reference {
        let (x0, x1) = (c.x_range().start, c.x_range().end);
        c.draw_series(DashedLineSeries::new(
            [(x0, r), (x1, r)],
            6,
            4,
            RGBColor(0x88, 0x88, 0x88).stroke_width(1),
        ))
        .map_err(|e| err(&e))?;
    }
    for (i, s) in chart.series.iter().enumerate() {
        let mut points: Vec<(f64, f64)> = s.points.iter().copied().filter(drawable).collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let style = color(i).stroke_width(2);
        c.draw_series(LineSeries::new(points.clone(), style))
            .map_err(|e| err(&e))?;
        c.draw_series(points.iter().map(|&p| Circle::new(p, 3, color(i).filled())))
            .map_err(|e| err(&e))?;
    }
    Ok(())
}

/// Width of the legend column right of the plot.
const LEGEND_WIDTH: u32 = 210;

/// Splits off the legend column and draws one entry per series in it:
/// a line or a box in the series' colour, then its name.
fn with_legend<'a>(area: &Area<'a>, names: &[&str], boxes: bool) -> Result<Area<'a>, String> {
    let (plot, legend) = area.split_horizontally(SIZE.0 - LEGEND_WIDTH);
    for (i, name) in names.iter().enumerate() {
        let y = 50 + 24 * i as i32;
        let swatch = if boxes {
            legend.draw(&Rectangle::new(
                [(8, y - 7), (24, y + 7)],
                color(i).filled(),
            ))
        } else {
            legend.draw(&PathElement::new(
                vec![(4, y), (28, y)],
                color(i).stroke_width(2),
            ))
        };
        swatch.map_err(|e| e.to_string())?;
        legend
            .draw(&Text::new(
                name.to_string(),
                (34, y - 5),
                ("sans-serif", 15).into_font(),
            ))
            .map_err(|e| e.to_string())?;
    }
    Ok(plot)
}

fn finish(area: Area<'_>) -> Result<(), String> {
    area.present().map_err(|e| e.to_string())
}

impl LineChart {
    /// Renders the chart; points that cannot be drawn (non-finite, or ≤ 0
    /// on a log axis) are left out.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let drawn = (|| {
            let area = canvas(&mut out, &self.title)?;
            let names: Vec<&str> = self.series.iter().map(|s| s.name.as_str()).collect();
            let plot = with_legend(&area, &names, false)?;
            let points = || self.series.iter().flat_map(|s| s.points.iter().copied());
            let xs = range(points().map(|p| p.0), self.x_log);
            let ys_data = points().map(|p| p.1).chain(self.y_reference);
            let (mut ylo, yhi) = range(ys_data, self.y_log);
            if self.y_from_zero && !self.y_log {
                ylo = ylo.min(0.0);
            }
            match (self.x_log, self.y_log) {
                (false, false) => draw_lines(&plot, self, xs.0..xs.1, ylo..yhi)?,
                (true, false) => draw_lines(&plot, self, (xs.0..xs.1).log_scale(), ylo..yhi)?,
                (false, true) => draw_lines(&plot, self, xs.0..xs.1, (ylo..yhi).log_scale())?,
                (true, true) => draw_lines(
                    &plot,
                    self,
                    (xs.0..xs.1).log_scale(),
                    (ylo..yhi).log_scale(),
                )?,
            }
            finish(area)
        })();
        drawn
            .map(|()| out)
            .unwrap_or_else(|e| error_svg(&self.title, &e))
    }
}

impl BarChart {
    /// Renders the chart; `None` and non-finite values leave gaps.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let drawn = (|| {
            let area = canvas(&mut out, &self.title)?;
            let names: Vec<&str> = self.series.iter().map(|(n, _)| n.as_str()).collect();
            let plot = with_legend(&area, &names, true)?;
            self.draw(&plot)?;
            finish(area)
        })();
        drawn
            .map(|()| out)
            .unwrap_or_else(|e| error_svg(&self.title, &e))
    }

    fn value(&self, series: usize, category: usize) -> Option<f64> {
        self.series[series]
            .1
            .get(category)
            .copied()
            .flatten()
            .filter(|v| v.is_finite())
    }

    fn draw(&self, area: &Area<'_>) -> Result<(), String> {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        let n = self.categories.len();
        let tops: Vec<f64> = if self.stacked {
            (0..n)
                .map(|c| {
                    (0..self.series.len())
                        .filter_map(|s| self.value(s, c))
                        .sum()
                })
                .collect()
        } else {
            (0..self.series.len())
                .flat_map(|s| (0..n).filter_map(move |c| self.value(s, c)))
                .collect()
        };
        // Stacks grow from zero; side-by-side bars from the reference line
        // when one is set (speedups grow from 1.0), else from zero.
        let base = if self.stacked {
            0.0
        } else {
            self.y_reference.unwrap_or(0.0)
        };
        let (lo, hi) = range(
            tops.into_iter().chain([base]).chain(self.y_reference),
            false,
        );
        let categories = self.categories.clone();
        let mut c = ChartBuilder::on(area)
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            // A segmented range holds one segment per value, its end included.
            .build_cartesian_2d((0..n.max(1) - 1).into_segmented(), lo..hi)
            .map_err(|e| err(&e))?;
        c.configure_mesh()
            .disable_x_mesh()
            .y_desc(self.y_label.as_str())
            .y_label_formatter(&|v| format_tick(*v))
            .x_labels(n.max(1))
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => categories.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 16))
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            .draw()
            .map_err(|e| err(&e))?;
        // Bars are drawn in pixels inside each category's segment, on
        // `area`, whose pixels count from its own corner.
        let plot = c.plotting_area().clone();
        let (bx, by) = area.get_base_pixel();
        let map = |category: usize, y: f64| {
            let (x, y) = plot.map_coordinate(&(SegmentValue::Exact(category), y));
            (x - bx, y - by)
        };
        let width = {
            let (a, _) = map(0, lo);
            let (b, _) = map(1.min(n), lo);
            (b - a).max(1)
        };
        let bars = if self.stacked {
            1
        } else {
            self.series.len().max(1)
        } as i32;
        let bar = (width * 8 / 10 / bars).max(1);
        let mut stack = vec![0.0; n];
        for s in 0..self.series.len() {
            let mut rects = Vec::new();
            for (category, stacked_so_far) in stack.iter_mut().enumerate() {
                let Some(v) = self.value(s, category) else {
                    continue;
                };
                let (from, to, slot) = if self.stacked {
                    let r = (*stacked_so_far, *stacked_so_far + v, 0);
                    *stacked_so_far += v;
                    r
                } else {
                    (base, v, s as i32)
                };
                let (left, y_from) = map(category, from);
                let (_, y_to) = map(category, to);
                let x = left + width / 10 + slot * bar;
                let (top, bottom) = (y_from.min(y_to), y_from.max(y_to).max(y_from.min(y_to) + 1));
                rects.push(Rectangle::new(
                    [(x, top), (x + bar - 1, bottom)],
                    color(s).filled(),
                ));
            }
            for r in &rects {
                area.draw(r).map_err(|e| err(&e))?;
            }
        }
        if let Some(r) = self.y_reference {
            let (x0, y) = map(0, r);
            let (x1, _) = map(n, r);
            area.draw(&plotters::element::DashedPathElement::new(
                vec![(x0, y), (x1, y)],
                6,
                4,
                RGBColor(0x88, 0x88, 0x88).stroke_width(1),
            ))
            .map_err(|e| err(&e))?;
        }
        Ok(())
    }
}

/// A figure that could not be drawn says so in its place.
fn error_svg(title: &str, error: &str) -> String {
    let escape = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\"><text x=\"20\" y=\"40\">{}: cannot draw: {}</text></svg>\n",
        SIZE.0,
        SIZE.1,
        escape(title),
        escape(error)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(x_log: bool, y_log: bool) -> LineChart {
        LineChart {
            title: "t<1>".into(),
            x_label: "rate".into(),
            y_label: "ratio".into(),
            x_log,
            y_log,
            y_reference: Some(1.0),
            series: vec![
                Series {
                    name: "alpha".into(),
                    points: vec![(1.0, 2.0), (0.0, 3.0), (10.0, 20.0), (100.0, f64::NAN)],
                },
                Series {
                    name: "beta".into(),
                    points: vec![(2.0, 1.5), (20.0, 4.0)],
                },
            ],
            ..LineChart::default()
        }
    }

    /// The text of every `<text>` element.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                Some(
                    t.split_once('>')?
                        .1
                        .split_once("</text>")?
                        .0
                        .trim()
                        .to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn line_charts_draw_drawable_points_titles_and_legends() {
        let svg = line(true, true).render();
        // alpha: (1,2) and (10,20) (0 is not on a log axis, NaN nowhere);
        // beta: two.
        assert_eq!(svg.matches("<circle").count(), 4, "{svg}");
        let labels = texts(&svg);
        for text in ["t&lt;1&gt;", "alpha", "beta", "rate", "ratio", "1", "100"] {
            assert!(
                labels.iter().any(|l| l == text),
                "{text} missing: {labels:?}"
            );
        }
        let linear = line(false, false).render();
        assert_eq!(linear.matches("<circle").count(), 5);
        // The reference line at 1.0 is drawn dashed: many short pieces.
        let without = LineChart {
            y_reference: None,
            ..line(false, false)
        }
        .render();
        let pieces = |svg: &str| svg.matches("<polyline").count();
        assert!(pieces(&linear) > pieces(&without) + 5, "{linear}");
    }

    #[test]
    fn stacked_bars_draw_one_rectangle_per_value() {
        let chart = |stacked| BarChart {
            title: "b".into(),
            y_label: "share".into(),
            categories: vec!["p".into(), "q".into()],
            series: vec![
                ("s1".into(), vec![Some(1.0), Some(2.0)]),
                ("s2".into(), vec![None, Some(1.0)]),
            ],
            stacked,
            y_reference: Some(1.5),
        };
        let count = |svg: &str| svg.matches("<rect").count();
        let empty = BarChart {
            series: vec![
                ("s1".into(), vec![None, None]),
                ("s2".into(), vec![None, None]),
            ],
            ..chart(true)
        }
        .render();
        let stacked = chart(true).render();
        let grouped = chart(false).render();
        // Three values drawn in both layouts, on top of the same frame.
        assert_eq!(count(&stacked) - count(&empty), 3, "{stacked}");
        assert_eq!(count(&grouped) - count(&empty), 3, "{grouped}");
        let labels = texts(&stacked);
        for text in ["p", "q", "s1", "s2", "share"] {
            assert!(
                labels.iter().any(|l| l == text),
                "{text} missing: {labels:?}"
            );
        }
    }

    #[test]
    fn ticks_read_short() {
        assert_eq!(format_tick(0.0), "0");
        assert_eq!(format_tick(1.5), "1.5");
        assert_eq!(format_tick(30_000.0), "30k");
        assert_eq!(format_tick(2_000_000.0), "2M");
        assert_eq!(format_tick(0.001), "0.001");
    }
}
