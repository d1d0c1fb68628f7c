//! The report: a markdown table per data set size, with each peer's ratio
//! to Cellar, and the raw results as JSON, in the output directory.

use std::fmt::Write as _;

use serde_json::Value as Json;

fn mb(b: f64) -> String {
    format!("{:.1}", b / 1e6)
}

/// Writes `results.md` and `results.json` under `out`.
pub fn write(out: &std::path::Path, all: &[Json], quick: bool) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| e.to_string())?;
    let name = if quick { "quick" } else { "results" };
    std::fs::write(
        out.join(format!("{name}.json")),
        serde_json::to_string_pretty(all).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    let mut md = String::new();
    let mut sizes: Vec<u64> = all.iter().filter_map(|j| j["rows"].as_u64()).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for rows in sizes {
        let runs: Vec<&Json> = all.iter().filter(|j| j["rows"].as_u64() == Some(rows)).collect();
        let cellar = runs.iter().find(|j| j["engine"] == "cellar");
        let _ = writeln!(md, "### {rows} rows\n");
        let _ = writeln!(
            md,
            "| workload | engine | ops/s | p50 us | p99 us | MB written | Cellar's ops/s ratio |\n|---|---|---|---|---|---|---|"
        );
        // Every workload any engine ran, in the order first met.
        let mut workloads: Vec<String> = Vec::new();
        for j in &runs {
            for w in j["results"].as_array().into_iter().flatten() {
                if let Some(w) = w["workload"].as_str()
                    && !workloads.iter().any(|x| x == w)
                {
                    workloads.push(w.to_string());
                }
            }
        }
        for w in &workloads {
            let find = |j: &Json| -> Option<Json> {
                j["results"]
                    .as_array()?
                    .iter()
                    .find(|r| r["workload"] == w.as_str())
                    .cloned()
            };
            let base = cellar.and_then(|c| find(c)).and_then(|r| r["ops_per_sec"].as_f64());
            for j in &runs {
                let Some(r) = find(j) else { continue };
                let ops = r["ops_per_sec"].as_f64().unwrap_or(0.0);
                let ratio = match base {
                    Some(b) if ops > 0.0 => format!("{:.2}", b / ops),
                    _ => "-".into(),
                };
                let _ = writeln!(
                    md,
                    "| {w} | {} | {:.0} | {:.0} | {:.0} | {} | {ratio} |",
                    j["engine"].as_str().unwrap_or("?"),
                    ops,
                    r["p50_us"].as_f64().unwrap_or(0.0),
                    r["p99_us"].as_f64().unwrap_or(0.0),
                    mb(r["bytes_written"].as_f64().unwrap_or(0.0)),
                );
            }
        }
        let png = format!("{name}-{rows}.png");
        match crate::chart::draw(&out.join(&png), rows, &runs, &workloads) {
            Ok(true) => {
                let _ = writeln!(md, "\n![ops/s by workload, {rows} rows]({png})");
            }
            Ok(false) => eprintln!("no chart: the font DejaVuSans.ttf is missing"),
            Err(e) => eprintln!("chart {png}: {e}"),
        }
        let _ = writeln!(md, "\n| engine | MB on disk | peak RSS MB |\n|---|---|---|");
        for j in &runs {
            let _ = writeln!(
                md,
                "| {} | {} | {} |",
                j["engine"].as_str().unwrap_or("?"),
                mb(j["bytes_on_disk"].as_f64().unwrap_or(0.0)),
                mb(j["peak_rss"].as_f64().unwrap_or(0.0))
            );
        }
        let _ = writeln!(
            md,
            "\nOn disk: a store's directory after the random-order load, settled; \
             the Parquet files of a `-parquet` engine."
        );
        md.push('\n');
    }
    std::fs::write(out.join(format!("{name}.md")), md).map_err(|e| e.to_string())
}
