//! A low-rank delta over a model's dense weights (LoRA): how ken ships a
//! model fine-tuned for code as a small file over base weights it already
//! fetches and verifies.
//!
//! The delta file is safetensors: for each changed weight `W` (`out × in`)
//! of the base, `<W's name without .weight>.lora_a` (`rank × in`) and
//! `.lora_b` (`out × rank`), and in its metadata `scale` (LoRA's
//! alpha / rank). The merged weight is `W + scale · B·A`, summed in a fixed
//! order so that a merge gives the same bytes on every machine.
//! `scripts/code-model/` makes the file.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use anyhow::{bail, Context, Result};
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;

/// Values of a tensor of `f32` or `f16` as `f32`.
fn values(view: &TensorView<'_>) -> Result<Vec<f32>> {
    let bytes = view.data();
    Ok(match view.dtype() {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        other => bail!("a {other:?} tensor; ken merges f32 and f16"),
    })
}

/// The delta's matrices by the base weight they change: `(A, B, rank)`.
struct Delta {
    scale: f32,
    by_weight: HashMap<String, (Vec<f32>, Vec<f32>, usize)>,
}

impl Delta {
    fn read(lora: &[u8]) -> Result<Delta> {
        let (_, header) = SafeTensors::read_metadata(lora).context("reading the delta's header")?;
        let scale: f32 = header
            .metadata()
            .as_ref()
            .and_then(|m| m.get("scale"))
            .context("the delta has no scale in its metadata")?
            .parse()
            .context("the delta's scale is not a number")?;
        let tensors = SafeTensors::deserialize(lora).context("reading the delta")?;
        let mut by_weight = HashMap::new();
        for (name, a) in tensors.tensors() {
            let Some(module) = name.strip_suffix(".lora_a") else {
                continue;
            };
            let b = tensors
                .tensor(&format!("{module}.lora_b"))
                .with_context(|| format!("the delta has {name} but no {module}.lora_b"))?;
            let (&[rank, _], &[_, rank_b]) = (a.shape(), b.shape()) else {
                bail!("{module}: the delta's matrices are not two-dimensional");
            };
            if rank != rank_b {
                bail!("{module}: the delta's matrices disagree on the rank ({rank} and {rank_b})");
            }
            by_weight.insert(format!("{module}.weight"), (values(&a)?, values(&b)?, rank));
        }
        if by_weight.is_empty() {
            bail!("the delta changes no weight");
        }
        Ok(Delta { scale, by_weight })
    }
}

/// Writes to `out` the weights of `base` (safetensors) with the delta `lora`
/// added; fails, writing nothing, when a weight it changes is missing or of
/// another shape.
pub fn merge(base: &Path, lora: &[u8], out: &Path) -> Result<()> {
    let delta = Delta::read(lora)?;
    let bytes = fs::read(base).with_context(|| format!("reading {}", base.display()))?;
    let weights = SafeTensors::deserialize(&bytes).with_context(|| format!("reading {}", base.display()))?;
    let mut merged: Vec<(String, Vec<u8>, Dtype, Vec<usize>)> = Vec::new();
    let mut changed = 0;
    let mut names = weights.names();
    names.sort();
    for name in names {
        let view = weights.tensor(name)?;
        let data = match delta.by_weight.get(name) {
            None => view.data().to_vec(),
            Some((a, b, rank)) => {
                let &[rows, cols] = view.shape() else {
                    bail!("{name} is not a matrix");
                };
                if view.dtype() != Dtype::F32 || a.len() != rank * cols || b.len() != rows * rank {
                    bail!(
                        "{name}: the delta does not fit the base weight ({rows} x {cols}, {:?})",
                        view.dtype()
                    );
                }
                changed += 1;
                let mut w = values(&view)?;
                for (i, row) in w.chunks_exact_mut(cols).enumerate() {
                    let b_row = &b[i * rank..(i + 1) * rank];
                    for (j, weight) in row.iter_mut().enumerate() {
                        let mut sum = 0.0f32;
                        for (k, &b_ik) in b_row.iter().enumerate() {
                            sum += b_ik * a[k * cols + j];
                        }
                        *weight += delta.scale * sum;
                    }
                }
                w.iter().flat_map(|v| v.to_le_bytes()).collect()
            }
        };
        merged.push((name.to_string(), data, view.dtype(), view.shape().to_vec()));
    }
    if changed != delta.by_weight.len() {
        let missing: Vec<&String> = delta.by_weight.keys().filter(|w| weights.tensor(w).is_err()).collect();
        bail!("the base has no weight {missing:?} that the delta changes");
    }
    let views = merged
        .iter()
        .map(|(name, data, dtype, shape)| Ok((name.as_str(), TensorView::new(*dtype, shape.clone(), data)?)))
        .collect::<Result<Vec<_>>>()?;
    // One temporary file per process: two first uses at once each write their own.
    let tmp = out.with_extension(format!("part-{}", std::process::id()));
    let written = safetensors::serialize_to_file(views, None, &tmp)
        .with_context(|| format!("writing {}", tmp.display()))
        .and_then(|()| fs::rename(&tmp, out).with_context(|| format!("writing {}", out.display())));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn file(tensors: &[(&str, Vec<f32>, Vec<usize>)], scale: Option<&str>) -> Vec<u8> {
        let data: Vec<Vec<u8>> = tensors.iter().map(|(_, v, _)| f32_bytes(v)).collect();
        let views: Vec<(&str, TensorView<'_>)> = tensors
            .iter()
            .zip(&data)
            .map(|((name, _, shape), bytes)| (*name, TensorView::new(Dtype::F32, shape.clone(), bytes).unwrap()))
            .collect();
        let metadata = scale.map(|s| HashMap::from([("scale".to_string(), s.to_string())]));
        safetensors::serialize(views, metadata).unwrap()
    }

    fn read(path: &Path, name: &str) -> Vec<f32> {
        let bytes = fs::read(path).unwrap();
        let tensors = SafeTensors::deserialize(&bytes).unwrap();
        values(&tensors.tensor(name).unwrap()).unwrap()
    }

    #[test]
    fn the_merge_adds_scale_times_b_a_to_the_weights_it_names_only() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("model.safetensors");
        let w = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2 x 3
        let bias = vec![0.5, -0.5];
        fs::write(
            &base,
            file(
                &[
                    ("l.dense.weight", w.clone(), vec![2, 3]),
                    ("l.dense.bias", bias.clone(), vec![2]),
                ],
                None,
            ),
        )
        .unwrap();
        // rank 1: A = [1 0 2], B = [1; -1]; B·A = [[1 0 2], [-1 0 -2]].
        let lora = file(
            &[
                ("l.dense.lora_a", vec![1.0, 0.0, 2.0], vec![1, 3]),
                ("l.dense.lora_b", vec![1.0, -1.0], vec![2, 1]),
            ],
            Some("0.5"),
        );
        let out = dir.path().join("merged.safetensors");
        merge(&base, &lora, &out).unwrap();
        assert_eq!(read(&out, "l.dense.weight"), vec![1.5, 2.0, 4.0, 3.5, 5.0, 5.0]);
        assert_eq!(read(&out, "l.dense.bias"), bias);
        let again = dir.path().join("again.safetensors");
        merge(&base, &lora, &again).unwrap();
        assert_eq!(
            fs::read(&out).unwrap(),
            fs::read(&again).unwrap(),
            "a merge gives the same bytes every time"
        );
    }

    #[test]
    fn a_delta_that_does_not_fit_its_base_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("model.safetensors");
        fs::write(&base, file(&[("l.dense.weight", vec![0.0; 6], vec![2, 3])], None)).unwrap();
        let out = dir.path().join("merged.safetensors");
        let wrong_shape = file(
            &[
                ("l.dense.lora_a", vec![0.0; 4], vec![1, 4]),
                ("l.dense.lora_b", vec![0.0; 2], vec![2, 1]),
            ],
            Some("1"),
        );
        let other_weight = file(
            &[
                ("m.dense.lora_a", vec![0.0; 3], vec![1, 3]),
                ("m.dense.lora_b", vec![0.0; 2], vec![2, 1]),
            ],
            Some("1"),
        );
        let no_scale = file(
            &[
                ("l.dense.lora_a", vec![0.0; 3], vec![1, 3]),
                ("l.dense.lora_b", vec![0.0; 2], vec![2, 1]),
            ],
            None,
        );
        for (lora, says) in [
            (wrong_shape, "does not fit"),
            (other_weight, "no weight"),
            (no_scale, "scale"),
        ] {
            let error = format!("{:#}", merge(&base, &lora, &out).unwrap_err());
            assert!(error.contains(says), "{error}");
            let files: Vec<_> = fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(
                files,
                vec![std::ffi::OsString::from("model.safetensors")],
                "nothing written"
            );
        }
    }
}
