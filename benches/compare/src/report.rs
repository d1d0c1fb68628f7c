//! The report: a markdown table per data set size, and one for U's pass,
//! with each peer's ratio to Cellar, and the raw results as JSON, in the
//! output directory.

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
    // A section per (U's pass?, rows): the data set sizes, then U's pass.
    let section = |j: &Json| (j["pass"] == "upserts", j["rows"].as_u64().unwrap_or(0));
    let mut sections: Vec<(bool, u64)> = all.iter().map(section).collect();
    sections.sort_unstable();
    sections.dedup();
    for (upserts, rows) in sections {
        let runs: Vec<&Json> = all.iter().filter(|j| section(j) == (upserts, rows)).collect();
        let cellar = runs.iter().find(|j| j["engine"] == "cellar");
        let (title, png) = if upserts {
            let n = runs.first().and_then(|j| j["upserts"].as_u64()).unwrap_or(0);
            (
                format!("U: {n} upserts into {rows} rows"),
                format!("{name}-upserts-{rows}.png"),
            )
        } else {
            (format!("{rows} rows"), format!("{name}-{rows}.png"))
        };
        let _ = writeln!(md, "### {title}\n");
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
                // A load stopped at its time cap: how far it came.
                let engine = match r["stopped_of"].as_u64() {
                    Some(of) => format!(
                        "{} (stopped after {} of {of} rows)",
                        j["engine"].as_str().unwrap_or("?"),
                        r["ops"].as_u64().unwrap_or(0)
                    ),
                    None => j["engine"].as_str().unwrap_or("?").to_string(),
                };
                let ratio = match base {
                    Some(b) if ops > 0.0 => format!("{:.2}", b / ops),
                    _ => "-".into(),
                };
                let _ = writeln!(
                    md,
                    "| {w} | {engine} | {:.0} | {:.0} | {:.0} | {} | {ratio} |",
                    ops,
                    r["p50_us"].as_f64().unwrap_or(0.0),
                    r["p99_us"].as_f64().unwrap_or(0.0),
                    mb(r["bytes_written"].as_f64().unwrap_or(0.0)),
                );
            }
        }
        match crate::chart::draw(&out.join(&png), &title, &runs, &workloads) {
            Ok(true) => {
                let _ = writeln!(md, "\n![ops/s by workload, {title}]({png})");
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
            "\n{}",
            if upserts {
                "On disk: a store's directory after the key-order load and the upserts, settled."
            } else {
                "On disk: a store's directory after the random-order load, settled; \
                 the Parquet files of a `-parquet` engine."
            }
        );
        for j in runs.iter().filter(|j| j["read_on"] == "key-order load") {
            let _ = writeln!(
                md,
                "\n{}: its random-order load was stopped at the time cap, so its reads, \
                 queries and bytes on disk are of the table of its key-order load.",
                j["engine"].as_str().unwrap_or("?")
            );
        }
        md.push('\n');
    }
    std::fs::write(out.join(format!("{name}.md")), md).map_err(|e| e.to_string())
}
