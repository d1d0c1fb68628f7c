//! PNG charts of a report: per data set size, every workload's ops/s per
//! engine, grouped bars on a log scale.

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

/// Draws `path`: the workloads of `runs` (one data set size) as groups,
/// one bar per engine. Returns false (drawing nothing) without the font.
pub fn draw(path: &std::path::Path, rows: u64, runs: &[&Json], workloads: &[String]) -> Result<bool, String> {
    if !font() {
        return Ok(false);
    }
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let width = (workloads.len() as u32 * 90).max(1000);
    let root = BitMapBackend::new(path, (width, 800)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let engines: Vec<&str> = runs.iter().filter_map(|j| j["engine"].as_str()).collect();
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
    let n = workloads.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("ops/s by workload, {rows} rows (log scale)"),
            ("sans-serif", 24),
        )
        .margin(20)
        .x_label_area_size(230)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..n, (0.5f64..max * 2.0).log_scale())
        .map_err(|e| err(&e))?;
    let labels = workloads.to_vec();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(workloads.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 && i < labels.len() {
                labels[i].clone()
            } else {
                String::new()
            }
        })
        .x_label_style(("sans-serif", 14).into_font().transform(FontTransform::Rotate270))
        .y_desc("operations per second")
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
                let x0 = i as f64 + 0.1 + k as f64 * bar;
                Some(Rectangle::new(
                    [(x0, 0.5), (x0 + bar * 0.9, v.max(0.5))],
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
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(true)
}
