//! The percentile plot (`--plot FILE`, `compare --plot FILE`): an SVG with
//! latency (µs, log scale) against percentile on a "nines" axis
//! (`x = -log10(1 - q)`: 90% at 1, 99% at 2, 99.9% at 3 ...), one polyline
//! per result, a legend and labelled axes. The maximum is drawn at a separate
//! "max" position right of 99.999%. Pure; any thread.

use std::fmt::Write as _;

use crate::stats::{LatencyHist, RunResult};

/// One line of the plot: `(quantile, latency_us)` points, quantile in
/// `0.0..=1.0` (1.0 = the maximum).
#[derive(Clone, Debug, PartialEq)]
pub struct Curve {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// Highest regular position on the nines axis (99.999%).
pub const NINES_MAX: f64 = 5.0;
/// Where the maximum is drawn.
pub const MAX_POS: f64 = 5.6;

/// The x position of quantile `q`: `-log10(1 - q)`, `None` beyond
/// [`NINES_MAX`] (those points are drawn only as the maximum).
pub fn nines(q: f64) -> Option<f64> {
    if !(0.0..1.0).contains(&q) {
        return None;
    }
    let x = -(1.0 - q).log10();
    (x <= NINES_MAX + 1e-9).then_some(x.max(0.0))
}

impl Curve {
    /// The seven summary points of a result file (min, p50 ... p99.99, max).
    pub fn from_result(label: &str, r: &RunResult) -> Self {
        Curve {
            label: label.into(),
            points: r.latency_us.points().to_vec(),
        }
    }

    /// The full percentile spectrum of a histogram in nanoseconds.
    pub fn from_hist(label: &str, h: &LatencyHist) -> Self {
        let mut points = Vec::new();
        if !h.is_empty() {
            points.push((0.0, h.min() as f64 / 1e3));
            for v in h.iter_quantiles(4) {
                let q = v.quantile_iterated_to();
                if q < 1.0 && nines(q).is_some() {
                    points.push((q, h.highest_equivalent(v.value_iterated_to()) as f64 / 1e3));
                }
            }
            points.push((1.0, h.max() as f64 / 1e3));
        }
        Curve {
            label: label.into(),
            points,
        }
    }

    /// Plot coordinates `(x on the nines axis, latency_us)`, in order.
    pub fn xy(&self) -> Vec<(f64, f64)> {
        let mut v: Vec<(f64, f64)> = self
            .points
            .iter()
            .filter_map(|&(q, lat)| {
                let x = if q >= 1.0 { Some(MAX_POS) } else { nines(q) };
                x.map(|x| (x, lat))
            })
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    }
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn tick_label_us(v: f64) -> String {
    if v >= 1e6 {
        format!("{}s", v / 1e6)
    } else if v >= 1e3 {
        format!("{}ms", v / 1e3)
    } else if v >= 1.0 {
        format!("{v}us")
    } else {
        format!("{}ns", v * 1e3)
    }
}

/// Render the plot. `title` goes on top.
pub fn render_svg(title: &str, curves: &[Curve]) -> String {
    const W: f64 = 960.0;
    const H: f64 = 560.0;
    const L: f64 = 80.0;
    const R: f64 = 250.0;
    const T: f64 = 50.0;
    const B: f64 = 70.0;
    let (pw, ph) = (W - L - R, H - T - B);
    // Y range: whole decades around every positive value.
    let vals: Vec<f64> = curves
        .iter()
        .flat_map(|c| c.xy())
        .map(|p| p.1)
        .filter(|v| *v > 0.0 && v.is_finite())
        .collect();
    let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (mut d0, mut d1) = if vals.is_empty() {
        (0.0, 1.0)
    } else {
        (lo.log10().floor(), hi.log10().ceil())
    };
    if d1 <= d0 {
        d1 = d0 + 1.0;
    }
    d0 = d0.max(-3.0);
    d1 = d1.min(10.0).max(d0 + 1.0);
    let x_of = |x: f64| L + x / MAX_POS * pw;
    let y_of = |v: f64| {
        let lv = if v > 0.0 { v.log10() } else { d0 };
        T + ph - (lv.clamp(d0, d1) - d0) / (d1 - d0) * ph
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect x="0" y="0" width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="28" font-size="16" text-anchor="middle">{}</text>"#,
        L + pw / 2.0,
        esc(title)
    );
    // Grid and x ticks.
    let xt: [(f64, &str); 7] = [
        (0.0, "0%"),
        (1.0, "90%"),
        (2.0, "99%"),
        (3.0, "99.9%"),
        (4.0, "99.99%"),
        (5.0, "99.999%"),
        (MAX_POS, "max"),
    ];
    for (x, label) in xt {
        let px = x_of(x);
        let _ = writeln!(
            s,
            r##"<line x1="{px:.1}" y1="{T}" x2="{px:.1}" y2="{:.1}" stroke="#ddd"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
            T + ph,
            T + ph + 18.0
        );
    }
    let mut d = d0 as i32;
    while d as f64 <= d1 {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powi(d);
            if v.log10() > d1 + 1e-9 {
                break;
            }
            let py = y_of(v);
            let (stroke, label) = if m == 1.0 {
                ("#bbb", tick_label_us(v))
            } else {
                ("#eee", String::new())
            };
            let _ = writeln!(
                s,
                r#"<line x1="{L}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="{stroke}"/>"#,
                L + pw
            );
            if !label.is_empty() {
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"#,
                    L - 6.0,
                    py + 4.0
                );
            }
        }
        d += 1;
    }
    // Axes and their labels.
    let _ = writeln!(
        s,
        r#"<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">percentile</text>"#,
        L + pw / 2.0,
        H - 20.0
    );
    let _ = writeln!(
        s,
        r#"<text x="20" y="{:.1}" text-anchor="middle" transform="rotate(-90 20 {:.1})">latency (log scale)</text>"#,
        T + ph / 2.0,
        T + ph / 2.0
    );
    // Curves and legend.
    for (i, c) in curves.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<String> = c
            .xy()
            .iter()
            .map(|&(x, v)| format!("{:.1},{:.1}", x_of(x), y_of(v)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            pts.join(" ")
        );
        let ly = T + 10.0 + i as f64 * 20.0;
        let lx = L + pw + 16.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 24.0,
            lx + 30.0,
            ly + 4.0,
            esc(&c.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{new_hist, record};

    #[test]
    fn nines_axis() {
        assert_eq!(nines(0.0), Some(0.0));
        assert!((nines(0.9).unwrap() - 1.0).abs() < 1e-9);
        assert!((nines(0.999).unwrap() - 3.0).abs() < 1e-9);
        assert!((nines(0.99999).unwrap() - 5.0).abs() < 1e-6);
        assert_eq!(nines(0.9999999), None);
        assert_eq!(nines(1.0), None);
        assert_eq!(nines(-0.1), None);
    }

    #[test]
    fn curve_from_hist_is_monotonic_and_ends_at_max() {
        let mut h = new_hist();
        for i in 1..=100_000u64 {
            record(&mut h, i * 10);
        }
        let c = Curve::from_hist("x", &h);
        let xy = c.xy();
        assert!(xy.len() > 10);
        assert!(xy.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1), "{xy:?}");
        assert_eq!(xy.last().unwrap().0, MAX_POS);
        assert!((xy.last().unwrap().1 - 1000.0).abs() < 1.0);
        assert!((xy[0].1 - 0.01).abs() < 1e-6);
        assert!(Curve::from_hist("empty", &new_hist()).points.is_empty());
    }

    #[test]
    fn svg_has_one_polyline_per_curve_and_a_legend() {
        let a = Curve {
            label: "raw <shm>".into(),
            points: vec![(0.0, 1.5), (0.5, 2.0), (0.99, 3.0), (1.0, 40.0)],
        };
        let b = Curve {
            label: "null".into(),
            points: vec![(0.0, 2.5), (0.5, 3.0), (0.9999, 9.0), (1.0, 120.0)],
        };
        let svg = render_svg("t & u", &[a.clone(), b]);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("raw &lt;shm&gt;") && svg.contains(">null<"));
        assert!(svg.contains("t &amp; u"));
        assert!(svg.contains(">percentile<") && svg.contains("latency (log scale)"));
        for t in ["99.9%", "max", "1us", "10us", "100us", "1ms"] {
            assert!(svg.contains(&format!(">{t}<")), "tick {t} missing");
        }
        // Each polyline has as many points as the curve has plottable points.
        let first = svg.lines().find(|l| l.starts_with("<polyline")).unwrap();
        let pts = first.split("points=\"").nth(1).unwrap().trim_end_matches("\"/>");
        assert_eq!(pts.split(' ').count(), a.xy().len());
        // Larger latency is higher on the page (smaller y).
        let ys: Vec<f64> = pts
            .split(' ')
            .map(|p| p.split(',').nth(1).unwrap().parse().unwrap())
            .collect();
        assert!(ys.windows(2).all(|w| w[0] >= w[1]), "{ys:?}");
    }

    #[test]
    fn svg_of_nothing_is_still_an_svg() {
        let svg = render_svg("empty", &[]);
        assert!(svg.contains("</svg>") && !svg.contains("<polyline"));
    }
}
