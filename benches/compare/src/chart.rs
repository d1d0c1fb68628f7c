//! PNG charts of a report: per data set size, every workload's ops/s per
//! engine, as horizontal grouped bars on a log scale.

use plotters::prelude::*;
use serde_json::Value as Json;

/// The font the charts are drawn with (Debian's fonts-dejavu-core).
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

const COLORS: [RGBColor; 7] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
];

/// Empty bands below the workloads, where the legend goes.
const LEGEND_BANDS: f64 = 2.0;

/// Registers the font once; false when it is not on this machine.
fn font() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| match std::fs::read(FONT) {
        Ok(bytes) => {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
        }
        Err(_) => false,
    })
}

/// Draws `path`: the workloads of `runs` (one data set size, or U's pass:
/// `title` says which) as groups,
/// one bar per engine. Returns false (drawing nothing) without the font.
pub fn draw(path: &std::path::Path, title: &str, runs: &[&Json], workloads: &[String]) -> Result<bool, String> {
    if !font() {
        return Ok(false);
    }
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let engines: Vec<&str> = runs.iter().filter_map(|j| j["engine"].as_str()).collect();
    // Horizontal bars: one band per workload (first at the top), one bar
    // per engine in it, so that the workload names read level.
    let band = (engines.len().max(1) as u32 * 14 + 12).max(40);
    let height = (workloads.len() as f64 + LEGEND_BANDS) as u32 * band + 160;
    let root = BitMapBackend::new(path, (1200, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let value = |j: &Json, w: &str| -> Option<f64> {
        j["results"]
            .as_array()?
            .iter()
            .find(|r| r["workload"] == w)?
            .get("ops_per_sec")?
            .as_f64()
    };
    let max = runs
        .iter()
        .flat_map(|j| workloads.iter().filter_map(|w| value(j, w)))
        .fold(10.0f64, f64::max);
    // The axis starts below the slowest rate (a query that took a minute
    // is 0.02 ops/s), down to 0.001.
    let floor = runs
        .iter()
        .flat_map(|j| workloads.iter().filter_map(|w| value(j, w)))
        .filter(|v| *v > 0.0)
        .fold(0.5f64, f64::min)
        .max(0.002)
        / 2.0;
    let n = workloads.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("operations per second by workload, {title} (log scale; longer is faster)"),
            ("sans-serif", 22),
        )
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(330)
        .build_cartesian_2d((floor..max * 3.0).log_scale(), -LEGEND_BANDS..n)
        .map_err(|e| err(&e))?;
    let labels = workloads.to_vec();
    // Band i (from the top) spans y in [n-1-i, n-i); below 0, the legend.
    let band_of = |y: f64| -> Option<usize> {
        let i = (n - 1.0 - y.floor()) as usize;
        ((y - y.floor() - 0.5).abs() < 0.01 && i < labels.len()).then_some(i)
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(workloads.len() * 2 + 2 * LEGEND_BANDS as usize + 2)
        .y_label_formatter(&|y| band_of(*y).map(|i| labels[i].clone()).unwrap_or_default())
        .y_label_style(("sans-serif", 15))
        .x_label_formatter(&|x| {
            if *x >= 1e6 {
                format!("{}M", x / 1e6)
            } else if *x >= 1e3 {
                format!("{}k", x / 1e3)
            } else if *x >= 1.0 {
                format!("{x}")
            } else {
                format!("{x:.3}")
            }
        })
        .x_desc("operations per second")
        .draw()
        .map_err(|e| err(&e))?;
    let bar = 0.8 / engines.len().max(1) as f64;
    for (k, (j, name)) in runs.iter().zip(&engines).enumerate() {
        let color = COLORS[k % COLORS.len()];
        let bars: Vec<Rectangle<(f64, f64)>> = workloads
            .iter()
            .enumerate()
            .filter_map(|(i, w)| {
                let v = value(j, w)?;
                let y0 = n - 1.0 - i as f64 + 0.9 - (k + 1) as f64 * bar;
                Some(Rectangle::new(
                    [(floor, y0), (v.max(floor), y0 + bar * 0.85)],
                    color.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(|e| err(&e))?
            .label(name.to_string())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(true)
}
