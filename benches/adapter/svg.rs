//! A small SVG line chart for the report's curves (figure 10): x on a log scale (the counts of
//! runs), y linear from 0, one polyline and its points per series, a legend. No dependency.

use std::fmt::Write as _;

pub(crate) struct Series<'a> {
    pub(crate) name: &'a str,
    pub(crate) color: &'a str,
    /// One value per x, `None` where it was not measured.
    pub(crate) ys: Vec<Option<f64>>,
}

const W: f64 = 640.0;
const H: f64 = 360.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// The chart as an SVG document.
pub(crate) fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    xs: &[f64],
    series: &[Series],
) -> String {
    let ymax = series
        .iter()
        .flat_map(|s| s.ys.iter().flatten())
        .fold(0.0f64, |a, b| a.max(*b));
    let ymax = nice(ymax * 1.1);
    let (lx0, lx1) = (
        xs.first().copied().unwrap_or(1.0).ln(),
        xs.last().copied().unwrap_or(10.0).ln(),
    );
    let span = (lx1 - lx0).max(1e-9);
    let px = |x: f64| LEFT + (x.ln() - lx0) / span * (W - LEFT - RIGHT);
    let py = |y: f64| H - BOTTOM - y / ymax * (H - TOP - BOTTOM);
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="14" font-weight="bold">{}</text>
"#,
        W / 2.0,
        esc(title)
    );
    for i in 0..=5 {
        let y = ymax * i as f64 / 5.0;
        let (x2, yy, tx, ty, label) = (W - RIGHT, py(y), LEFT - 6.0, py(y) + 4.0, short(y));
        let _ = writeln!(
            o,
            r##"<line x1="{LEFT}" x2="{x2}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{tx}" y="{ty:.1}" text-anchor="end">{label}</text>"##
        );
    }
    for x in xs {
        let (xx, y2, ty, label) = (px(*x), H - BOTTOM, H - BOTTOM + 16.0, short(*x));
        let _ = writeln!(
            o,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{TOP}" y2="{y2}" stroke="#eee"/><text x="{xx:.1}" y="{ty}" text-anchor="middle">{label}</text>"##
        );
    }
    let _ = writeln!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text><text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        H - 10.0,
        esc(x_label),
        (TOP + H - BOTTOM) / 2.0,
        (TOP + H - BOTTOM) / 2.0,
        esc(y_label)
    );
    for (k, s) in series.iter().enumerate() {
        let pts: Vec<(f64, f64)> = xs
            .iter()
            .zip(&s.ys)
            .filter_map(|(x, y)| y.map(|y| (px(*x), py(y))))
            .collect();
        let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = writeln!(
            o,
            r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
            s.color,
            path.join(" ")
        );
        for (x, y) in &pts {
            let _ = writeln!(
                o,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{}"/>"#,
                s.color
            );
        }
        let ly = TOP + 4.0 + 16.0 * k as f64;
        let _ = writeln!(
            o,
            r#"<rect x="{}" y="{}" width="12" height="3" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            LEFT + 10.0,
            ly,
            s.color,
            LEFT + 28.0,
            ly + 5.0,
            esc(s.name)
        );
    }
    o.push_str("</svg>\n");
    o
}

/// A round upper bound for the axis.
fn nice(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

fn short(v: f64) -> String {
    if v >= 1_000_000.0 {
        format!("{}M", trim(v / 1_000_000.0))
    } else if v >= 1000.0 {
        format!("{}k", trim(v / 1000.0))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
