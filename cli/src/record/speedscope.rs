//! The speedscope file format (what py-spy writes): one sampled profile per
//! thread, samples in the order they were taken.

use std::io::Write;

use anyhow::Result;
use serde_json::{json, Value};

use super::profile::{FrameOrigin, Profile};

/// The document.
pub fn document(p: &Profile, title: &str) -> Value {
    let frames: Vec<Value> = p
        .frames
        .iter()
        .map(|f| {
            let mut v = json!({ "name": f.name });
            if let Some(file) = &f.file {
                v["file"] = json!(file);
            }
            if f.origin == FrameOrigin::Python {
                v["kind"] = json!("python");
            }
            v
        })
        .collect();
    let period = 1.0 / f64::from(p.rate.max(1));
    let profiles: Vec<Value> = p
        .threads
        .iter()
        .map(|(tid, t)| {
            let samples: Vec<&Vec<u32>> =
                t.samples.iter().map(|s| &p.stacks[*s as usize]).collect();
            let n = samples.len();
            json!({
                "type": "sampled",
                "name": format!("{} (tid {tid})", t.name),
                "unit": "seconds",
                "startValue": 0.0,
                "endValue": n as f64 * period,
                "samples": samples,
                "weights": vec![period; n],
            })
        })
        .collect();
    json!({
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "name": title,
        "exporter": format!("argstash {}", env!("CARGO_PKG_VERSION")),
        "activeProfileIndex": 0,
        "shared": { "frames": frames },
        "profiles": profiles,
    })
}

/// Writes the speedscope JSON.
pub fn write(p: &Profile, title: &str, w: &mut dyn Write) -> Result<()> {
    serde_json::to_writer(&mut *w, &document(p, title))?;
    writeln!(w)?;
    Ok(())
}
