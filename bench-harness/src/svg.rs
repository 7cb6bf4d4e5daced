//! Small SVG charts for the experiment reports: line charts (linear or log
//! axes) and grouped or stacked bar charts, with axes, tick labels and a legend.
//!
//! Output is plain SVG 1.1 text that browsers and `rsvg-convert` render alike;
//! no fonts are embedded (generic `sans-serif`).

use std::fmt::Write as _;

const WIDTH: f64 = 880.0;
const HEIGHT: f64 = 440.0;
const MARGIN_LEFT: f64 = 78.0;
const MARGIN_RIGHT: f64 = 290.0;
const MARGIN_TOP: f64 = 44.0;
const MARGIN_BOTTOM: f64 = 64.0;

/// Colour-blind friendly palette (Okabe–Ito), cycled over series.
const PALETTE: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
];

/// One named line of a [`LineChart`].
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart with markers; either axis may be logarithmic.
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
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    /// (series name, one value per category; `None` leaves a gap).
    pub series: Vec<(String, Vec<Option<f64>>)>,
    pub stacked: bool,
    pub y_reference: Option<f64>,
}

/// Maps data values to pixels on one axis.
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    px_lo: f64,
    px_hi: f64,
}

impl Axis {
    fn new(mut lo: f64, mut hi: f64, log: bool, px_lo: f64, px_hi: f64) -> Axis {
        if log {
            lo = 10f64.powf(lo.log10().floor());
            hi = 10f64.powf(hi.log10().ceil());
            if hi <= lo {
                hi = lo * 10.0;
            }
        } else {
            if hi <= lo {
                hi = lo + 1.0;
            }
            let step = nice_step((hi - lo) / 5.0);
            lo = (lo / step).floor() * step;
            hi = (hi / step).ceil() * step;
        }
        Axis {
            lo,
            hi,
            log,
            px_lo,
            px_hi,
        }
    }

    fn map(&self, v: f64) -> f64 {
        let f = if self.log {
            (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        self.px_lo + f * (self.px_hi - self.px_lo)
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let decades = (self.hi.log10() - self.lo.log10()).round() as i32;
            let mut ticks = Vec::new();
            let mut v = self.lo;
            for _ in 0..=decades {
                ticks.push(v);
                if decades <= 2 {
                    for m in [2.0, 5.0] {
                        if v * m < self.hi {
                            ticks.push(v * m);
                        }
                    }
                }
                v *= 10.0;
            }
            ticks
        } else {
            let step = nice_step((self.hi - self.lo) / 5.0);
            let first = (self.lo / step - 1e-9).ceil() * step;
            let n = ((self.hi - first) / step + 1e-9).floor() as i32;
            (0..=n).map(|i| first + step * f64::from(i)).collect()
        }
    }
}

/// The 1-2-5 step at or above `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// A short tick label: 0.001, 1.5, 20, 3k, 2M.
pub fn format_tick(v: f64) -> String {
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

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn header(out: &mut String, title: &str) {
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="24" text-anchor="middle" font-size="15" font-weight="bold">{}</text>
"##,
        (MARGIN_LEFT + WIDTH - MARGIN_RIGHT) / 2.0,
        escape(title)
    );
}

fn plot_box() -> (f64, f64, f64, f64) {
    (
        MARGIN_LEFT,
        WIDTH - MARGIN_RIGHT,
        MARGIN_TOP,
        HEIGHT - MARGIN_BOTTOM,
    )
}

/// Y axis with grid lines, tick labels and the rotated axis label.
fn y_axis(out: &mut String, y: &Axis, label: &str) {
    let (x0, x1, y0, y1) = plot_box();
    for t in y.ticks() {
        let py = y.map(t);
        let _ = writeln!(
            out,
            r##"<line x1="{x0}" y1="{py:.1}" x2="{x1}" y2="{py:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            py + 4.0,
            format_tick(t)
        );
    }
    let mid = (y0 + y1) / 2.0;
    let _ = writeln!(
        out,
        r##"<text transform="translate(18,{mid:.1}) rotate(-90)" text-anchor="middle">{}</text>"##,
        escape(label)
    );
    let _ = writeln!(
        out,
        r##"<rect x="{x0}" y="{y0}" width="{:.1}" height="{:.1}" fill="none" stroke="#444"/>"##,
        x1 - x0,
        y1 - y0
    );
}

fn reference_line(out: &mut String, y: &Axis, value: Option<f64>) {
    let (x0, x1, _, _) = plot_box();
    if let Some(v) = value {
        if v >= y.lo && v <= y.hi {
            let py = y.map(v);
            let _ = writeln!(
                out,
                r##"<line x1="{x0}" y1="{py:.1}" x2="{x1}" y2="{py:.1}" stroke="#888" stroke-dasharray="6,4"/>"##
            );
        }
    }
}

fn legend(out: &mut String, names: &[&str], as_boxes: bool) {
    let lx = WIDTH - MARGIN_RIGHT + 14.0;
    for (i, name) in names.iter().enumerate() {
        let ly = MARGIN_TOP + 10.0 + 20.0 * i as f64;
        let color = PALETTE[i % PALETTE.len()];
        if as_boxes {
            let _ = writeln!(
                out,
                r##"<rect x="{lx}" y="{:.1}" width="14" height="12" fill="{color}"/>"##,
                ly - 9.0
            );
        } else {
            let _ = writeln!(
                out,
                r##"<line x1="{lx}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="2"/><circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"##,
                ly - 3.0,
                lx + 18.0,
                ly - 3.0,
                lx + 9.0,
                ly - 3.0
            );
        }
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{ly:.1}">{}</text>"##,
            lx + 24.0,
            escape(name)
        );
    }
}

fn finite_range(values: impl Iterator<Item = f64>, log: bool) -> Option<(f64, f64)> {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    (lo <= hi).then_some((lo, hi))
}

impl LineChart {
    /// Renders the chart; points that cannot be drawn (non-finite, or ≤ 0 on
    /// a log axis) are left out.
    pub fn render(&self) -> String {
        let drawable = |&(x, y): &(f64, f64)| {
            x.is_finite() && y.is_finite() && (!self.x_log || x > 0.0) && (!self.y_log || y > 0.0)
        };
        let pts = || {
            self.series
                .iter()
                .flat_map(|s| s.points.iter().copied())
                .filter(drawable)
        };
        let (x0, x1, y0, y1) = plot_box();
        let (xlo, xhi) = finite_range(pts().map(|p| p.0), self.x_log).unwrap_or((1.0, 10.0));
        let (mut ylo, mut yhi) =
            finite_range(pts().map(|p| p.1), self.y_log).unwrap_or((1.0, 10.0));
        if let Some(r) = self.y_reference {
            ylo = ylo.min(r);
            yhi = yhi.max(r);
        }
        if self.y_from_zero && !self.y_log {
            ylo = ylo.min(0.0);
        }
        let x = Axis::new(xlo, xhi, self.x_log, x0, x1);
        let y = Axis::new(ylo, yhi, self.y_log, y1, y0);
        let mut out = String::new();
        header(&mut out, &self.title);
        y_axis(&mut out, &y, &self.y_label);
        for t in x.ticks() {
            let px = x.map(t);
            let _ = writeln!(
                out,
                r##"<line x1="{px:.1}" y1="{y0}" x2="{px:.1}" y2="{y1}" stroke="#eeeeee"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                y1 + 16.0,
                format_tick(t)
            );
        }
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            (x0 + x1) / 2.0,
            HEIGHT - 18.0,
            escape(&self.x_label)
        );
        reference_line(&mut out, &y, self.y_reference);
        for (i, s) in self.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let mut points: Vec<(f64, f64)> = s.points.iter().copied().filter(drawable).collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let path: Vec<String> = points
                .iter()
                .map(|&(px, py)| format!("{:.1},{:.1}", x.map(px), y.map(py)))
                .collect();
            if path.len() > 1 {
                let _ = writeln!(
                    out,
                    r##"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"##,
                    path.join(" ")
                );
            }
            for &(px, py) in &points {
                let _ = writeln!(
                    out,
                    r##"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{color}"/>"##,
                    x.map(px),
                    y.map(py)
                );
            }
        }
        let names: Vec<&str> = self.series.iter().map(|s| s.name.as_str()).collect();
        legend(&mut out, &names, false);
        out.push_str("</svg>\n");
        out
    }
}

impl BarChart {
    /// Renders the chart; `None` and non-finite values leave gaps.
    pub fn render(&self) -> String {
        let (x0, x1, y0, y1) = plot_box();
        let values = self
            .series
            .iter()
            .flat_map(|(_, v)| v.iter().flatten().copied());
        let (mut lo, mut hi) = if self.stacked {
            let totals = (0..self.categories.len()).map(|c| {
                self.series
                    .iter()
                    .filter_map(|(_, v)| v.get(c).copied().flatten())
                    .filter(|v| v.is_finite())
                    .sum::<f64>()
            });
            finite_range(totals, false).unwrap_or((0.0, 1.0))
        } else {
            finite_range(values, false).unwrap_or((0.0, 1.0))
        };
        if let Some(r) = self.y_reference {
            lo = lo.min(r);
            hi = hi.max(r);
        }
        // Stacks grow from zero; side-by-side bars from the reference line
        // when one is set (speedups grow from 1.0), else from zero. The
        // axis must include where they start.
        let base = if self.stacked {
            0.0
        } else {
            self.y_reference.unwrap_or(0.0)
        };
        lo = lo.min(base);
        let y = Axis::new(lo, hi, false, y1, y0);
        let mut out = String::new();
        header(&mut out, &self.title);
        y_axis(&mut out, &y, &self.y_label);
        let n_cat = self.categories.len().max(1) as f64;
        let group_w = (x1 - x0) / n_cat;
        let n_bars = if self.stacked {
            1.0
        } else {
            self.series.len().max(1) as f64
        };
        let bar_w = group_w * 0.8 / n_bars;
        for (c, cat) in self.categories.iter().enumerate() {
            let gx = x0 + group_w * c as f64;
            let _ = writeln!(
                out,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                gx + group_w / 2.0,
                y1 + 16.0,
                escape(cat)
            );
            let mut stack = 0.0;
            for (s, (_, vals)) in self.series.iter().enumerate() {
                let Some(v) = vals.get(c).copied().flatten().filter(|v| v.is_finite()) else {
                    continue;
                };
                let color = PALETTE[s % PALETTE.len()];
                let (from, to, bx) = if self.stacked {
                    let r = (stack, stack + v, gx + group_w * 0.1);
                    stack += v;
                    r
                } else {
                    (base, v, gx + group_w * 0.1 + bar_w * s as f64)
                };
                let (pa, pb) = (y.map(from), y.map(to));
                let _ = writeln!(
                    out,
                    r##"<rect x="{bx:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"##,
                    pa.min(pb),
                    (bar_w - 1.0).max(1.0),
                    (pa - pb).abs().max(0.5)
                );
            }
        }
        reference_line(&mut out, &y, self.y_reference);
        let names: Vec<&str> = self.series.iter().map(|(n, _)| n.as_str()).collect();
        legend(&mut out, &names, true);
        out.push_str("</svg>\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps_are_1_2_5() {
        assert_eq!(nice_step(0.13), 0.2);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(70.0), 100.0);
    }

    #[test]
    fn linear_ticks_are_multiples_of_the_step() {
        let a = Axis::new(0.55, 3.2, false, 0.0, 100.0);
        let ticks = a.ticks();
        assert!(
            ticks.iter().all(|t| (t / 1.0).fract().abs() < 1e-9),
            "{ticks:?}"
        );
        assert!(
            ticks.first().is_some_and(|t| *t >= a.lo) && ticks.last().is_some_and(|t| *t <= a.hi)
        );
    }

    #[test]
    fn log_axis_spans_whole_decades() {
        let a = Axis::new(3.0, 40.0, true, 0.0, 100.0);
        assert_eq!((a.lo, a.hi), (1.0, 100.0));
        assert!((a.map(10.0) - 50.0).abs() < 1e-9);
    }

    #[test]
    fn line_chart_skips_nonpositive_points_on_log_axes() {
        let chart = LineChart {
            title: "t<1>".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            x_log: true,
            y_log: true,
            y_from_zero: false,
            y_reference: None,
            series: vec![Series {
                name: "a".into(),
                points: vec![(1.0, 2.0), (0.0, 3.0), (10.0, 20.0)],
            }],
        };
        let svg = chart.render();
        assert_eq!(svg.matches("<circle").count(), 2 + 1); // 2 points + legend
        assert!(svg.contains("t&lt;1&gt;"));
    }

    #[test]
    fn stacked_bars_draw_one_rect_per_value() {
        let chart = BarChart {
            title: "b".into(),
            y_label: "y".into(),
            categories: vec!["p".into(), "q".into()],
            series: vec![
                ("s1".into(), vec![Some(1.0), Some(2.0)]),
                ("s2".into(), vec![None, Some(1.0)]),
            ],
            stacked: true,
            y_reference: None,
        };
        let svg = chart.render();
        // background + plot frame + 3 bars + 2 legend boxes
        assert_eq!(svg.matches("<rect").count(), 2 + 3 + 2);
    }
}
