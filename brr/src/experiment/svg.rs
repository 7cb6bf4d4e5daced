//! Minimal SVG line and bar charts for the experiment's figures.

use std::fmt::Write as _;

/// One series of (x, y) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
}

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];
const W: f64 = 720.0;
const H: f64 = 440.0;
const L: f64 = 70.0;
const R: f64 = 190.0;
const T: f64 = 40.0;
const B: f64 = 60.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A line chart with a log2 x axis and a log10 y axis.
pub fn log_log_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let pts = series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|p| p.0 > 0.0 && p.1 > 0.0);
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x.log2());
        x1 = x1.max(x.log2());
        y0 = y0.min(y.log10());
        y1 = y1.max(y.log10());
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let (y0, y1) = (y0.floor(), y1.ceil().max(y0.floor() + 1.0));
    let x1 = if x1 > x0 { x1 } else { x0 + 1.0 };
    let px = |x: f64| L + (x.log2() - x0) / (x1 - x0) * (W - L - R);
    let py = |y: f64| H - B - (y.log10() - y0) / (y1 - y0) * (H - T - B);
    let mut s = header(title);
    // Axes, grid and ticks.
    let _ = writeln!(
        s,
        r##"<rect x="{L}" y="{T}" width="{}" height="{}" fill="none" stroke="#000"/>"##,
        W - L - R,
        H - T - B
    );
    for e in (y0 as i32)..=(y1 as i32) {
        let y = py(10f64.powi(e));
        let _ = writeln!(
            s,
            r##"<line x1="{L}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - R,
            L - 6.0,
            y + 4.0,
            10f64.powi(e)
        );
    }
    // Every other tick label when they would crowd.
    let step = if x1 - x0 > 10.0 { 2 } else { 1 };
    for e in ((x0 as i32)..=(x1 as i32)).filter(|e| (e - x0 as i32) % step == 0) {
        let x = px(2f64.powi(e));
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{T}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">2^{e}</text>"##,
            H - B,
            H - B + 18.0
        );
    }
    axis_labels(&mut s, x_label, y_label);
    for (i, ser) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = ser
            .points
            .iter()
            .filter(|p| p.0 > 0.0 && p.1 > 0.0)
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let dash = if ser.dashed {
            r##" stroke-dasharray="6,4""##
        } else {
            ""
        };
        let _ = writeln!(
            s,
            r##"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"##,
            path.join(" ")
        );
        for p in &path {
            let (x, y) = p.split_once(',').unwrap();
            let _ = writeln!(s, r##"<circle cx="{x}" cy="{y}" r="3" fill="{color}"/>"##);
        }
        legend(&mut s, i, &ser.name, color, ser.dashed);
    }
    s + "</svg>\n"
}

/// Grouped bars: one group per category, one bar per series, y in 0..=1.
pub fn bar_chart(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> String {
    let mut s = header(title);
    let (pw, ph) = (W - L - R, H - T - B);
    let _ = writeln!(
        s,
        r##"<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="#000"/>"##
    );
    for k in 0..=10 {
        let v = f64::from(k) / 10.0;
        let y = H - B - v * ph;
        let _ = writeln!(
            s,
            r##"<line x1="{L}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{v:.1}</text>"##,
            W - R,
            L - 6.0,
            y + 4.0
        );
    }
    let group = pw / categories.len().max(1) as f64;
    let bar = group * 0.8 / series.len().max(1) as f64;
    for (c, name) in categories.iter().enumerate() {
        let gx = L + c as f64 * group;
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            gx + group / 2.0,
            H - B + 18.0,
            esc(name)
        );
        for (i, (_, values)) in series.iter().enumerate() {
            let v = values.get(c).copied().unwrap_or(0.0).clamp(0.0, 1.0);
            let _ = writeln!(
                s,
                r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"/>"##,
                gx + group * 0.1 + i as f64 * bar,
                H - B - v * ph,
                bar - 2.0,
                v * ph,
                COLORS[i % COLORS.len()]
            );
        }
    }
    for (i, (name, _)) in series.iter().enumerate() {
        legend(&mut s, i, name, COLORS[i % COLORS.len()], false);
    }
    axis_labels(&mut s, "", y_label);
    s + "</svg>\n"
}

fn header(title: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
        (W - R + L) / 2.0,
        esc(title)
    )
}

fn axis_labels(s: &mut String, x: &str, y: &str) {
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
        (W - R + L) / 2.0,
        H - 20.0,
        esc(x)
    );
    let _ = writeln!(
        s,
        r##"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>"##,
        (H - B + T) / 2.0,
        (H - B + T) / 2.0,
        esc(y)
    );
}

fn legend(s: &mut String, i: usize, name: &str, color: &str, dashed: bool) {
    let y = T + 10.0 + i as f64 * 20.0;
    let x = W - R + 15.0;
    let dash = if dashed {
        r##" stroke-dasharray="6,4""##
    } else {
        ""
    };
    let _ = writeln!(
        s,
        r##"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{color}" stroke-width="3"{dash}/><text x="{}" y="{}">{}</text>"##,
        x + 25.0,
        x + 30.0,
        y + 4.0,
        esc(name)
    );
}
