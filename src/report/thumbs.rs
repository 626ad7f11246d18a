//! Downscaled JPEG copies of the screenshots beside a report page (`report/`), made in parallel.
//!
//! A thumbnail's name is a hash of the screenshot's path inside the benchmark, so any file name (spaces,
//! non-ASCII) becomes a plain ASCII URL; an existing thumbnail newer than its screenshot is reused.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use rayon::prelude::*;
use sha2::{Digest, Sha256};

use super::ReportError;

/// Width of the thumbnails in pixels (narrower screenshots keep their size).
pub const THUMB_WIDTH: u32 = 400;
/// JPEG quality of the thumbnails.
const QUALITY: u8 = 75;
/// The folder of the thumbnails, beside the page.
pub const THUMB_DIR: &str = crate::rundir::REPORT_ASSETS;

/// The thumbnail file name of a screenshot path.
fn thumb_name(image: &str) -> String {
    let digest = Sha256::digest(image.as_bytes());
    let hex = crate::fingerprint::hex(&digest[..10]);
    format!("{hex}.jpg")
}

fn is_fresh(thumb: &Path, source: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    matches!((modified(thumb), modified(source)), (Some(t), Some(s)) if t >= s)
}

/// Area-averaging taps of a 1-D downscale from `src` to `dst` samples: per output sample, the first input
/// index and the weights (in 1/65536) of the inputs it covers.
fn taps(src: u32, dst: u32) -> Vec<(usize, Vec<u32>)> {
    let scale = src as f64 / dst as f64;
    (0..dst)
        .map(|o| {
            let (a, b) = (o as f64 * scale, (o + 1) as f64 * scale);
            let first = a.floor() as usize;
            let last = (b.ceil() as usize).min(src as usize).max(first + 1);
            let w: Vec<f64> = (first..last)
                .map(|i| ((i + 1) as f64).min(b) - (i as f64).max(a))
                .collect();
            let total: f64 = w.iter().sum();
            (
                first,
                w.iter()
                    .map(|x| (x / total * 65536.0).round() as u32)
                    .collect(),
            )
        })
        .collect()
}

/// Downscale an RGB image to `width` (height in proportion) by area averaging, one axis at a time.
/// (`image`'s `thumbnail` and its filters take several times longer on a phone screenshot.)
fn downscale(img: &image::RgbImage, width: u32) -> image::RgbImage {
    let (w, h) = img.dimensions();
    let height = ((h as u64 * width as u64 + w as u64 / 2) / w as u64).max(1) as u32;
    let src = img.as_raw();
    let mut mid = vec![0u8; width as usize * h as usize * 3];
    let tx = taps(w, width);
    for y in 0..h as usize {
        let row = &src[y * w as usize * 3..(y + 1) * w as usize * 3];
        for (x, (first, ws)) in tx.iter().enumerate() {
            let mut acc = [32768u32; 3];
            for (k, &wt) in ws.iter().enumerate() {
                let p = &row[(first + k) * 3..(first + k) * 3 + 3];
                for c in 0..3 {
                    acc[c] += p[c] as u32 * wt;
                }
            }
            let o = (y * width as usize + x) * 3;
            for c in 0..3 {
                mid[o + c] = (acc[c] >> 16).min(255) as u8;
            }
        }
    }
    let ty = taps(h, height);
    let stride = width as usize * 3;
    let mut out = vec![0u8; stride * height as usize];
    for (y, (first, ws)) in ty.iter().enumerate() {
        let dst = &mut out[y * stride..(y + 1) * stride];
        let mut acc = vec![32768u32; stride];
        for (k, &wt) in ws.iter().enumerate() {
            let row = &mid[(first + k) * stride..(first + k + 1) * stride];
            for (a, &v) in acc.iter_mut().zip(row) {
                *a += v as u32 * wt;
            }
        }
        for (d, a) in dst.iter_mut().zip(&acc) {
            *d = (a >> 16).min(255) as u8;
        }
    }
    image::RgbImage::from_raw(width, height, out).expect("buffer of the right size")
}

fn make_one(source: &Path, thumb: &Path) -> Result<(), String> {
    if is_fresh(thumb, source) {
        return Ok(());
    }
    let img = image::ImageReader::open(source)
        .and_then(|r| r.with_guessed_format())
        .map_err(|e| e.to_string())?
        .decode()
        .map_err(|e| e.to_string())?
        .to_rgb8();
    let small = if img.width() > THUMB_WIDTH {
        downscale(&img, THUMB_WIDTH)
    } else {
        img
    };
    let (w, h) = (
        u16::try_from(small.width()).map_err(|_| "image too large")?,
        u16::try_from(small.height()).map_err(|_| "image too tall for a JPEG thumbnail")?,
    );
    let tmp = thumb.with_extension(format!("tmp-{}", std::process::id()));
    let mut encoder = jpeg_encoder::Encoder::new_file(&tmp, QUALITY).map_err(|e| e.to_string())?;
    encoder.set_sampling_factor(jpeg_encoder::SamplingFactor::F_2_2);
    encoder
        .encode(small.as_raw(), w, h, jpeg_encoder::ColorType::Rgb)
        .map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, thumb).map_err(|e| e.to_string())
}

/// Thumbnails of `images` (paths relative to `root`) in `out/report/`: image path → URL relative to `out`,
/// `None` for a screenshot that could not be read (logged as a warning; the page says so).
pub fn make_thumbnails<'a>(
    root: &Path,
    images: impl IntoIterator<Item = &'a str>,
    out: &Path,
) -> Result<HashMap<String, Option<String>>, ReportError> {
    let dir = out.join(THUMB_DIR);
    std::fs::create_dir_all(&dir).map_err(|source| ReportError::Io {
        path: dir.clone(),
        source,
    })?;
    let unique: Vec<&str> = images
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let made: Vec<(&str, Result<String, String>)> = unique
        .par_iter()
        .map(|&image| {
            let name = thumb_name(image);
            let source = root.join(image);
            let made = make_one(&source, &dir.join(&name))
                .map(|()| format!("{THUMB_DIR}/{name}"))
                .map_err(|e| format!("{}: {e}", source.display()));
            (image, made)
        })
        .collect();
    // One warning for all unreadable screenshots (a benchmark copied without its images has thousands).
    let failed: Vec<&String> = made.iter().filter_map(|(_, r)| r.as_ref().err()).collect();
    if let Some(first) = failed.first() {
        tracing::warn!(
            "report: {} screenshot(s) could not be read, shown without image (first: {first})",
            failed.len()
        );
    }
    Ok(made
        .into_iter()
        .map(|(image, r)| (image.to_owned(), r.ok()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downscale_averages_areas_and_keeps_the_aspect_ratio() {
        // Alternating black and white columns average to mid grey at any scale.
        let img = image::RgbImage::from_fn(720, 1600, |x, _| {
            image::Rgb([if x % 2 == 0 { 0 } else { 255 }; 3])
        });
        let small = downscale(&img, 400);
        assert_eq!(small.dimensions(), (400, 889));
        assert!(
            small.pixels().all(|p| (100..=155).contains(&p[0])),
            "{:?}",
            small.get_pixel(0, 0)
        );
        let weights = taps(720, 400);
        assert!(weights
            .iter()
            .all(|(_, w)| w.iter().sum::<u32>().abs_diff(65536) <= 2));
    }
}
