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
pub(crate) const THUMB_WIDTH: u32 = 400;
/// JPEG quality of the thumbnails.
const QUALITY: u8 = 75;
/// The folder of the thumbnails, beside the page.
pub(crate) const THUMB_DIR: &str = crate::rundir::REPORT_ASSETS;

/// The thumbnail file name of a screenshot path.
fn thumb_name(image: &str) -> String {
    let digest = Sha256::digest(image.as_bytes());
    let hex = crate::fingerprint::hex(&digest[..10]);
    format!("{hex}.jpg")
}

/// A thumbnail (a non-empty file) at least as new as its screenshot.
fn is_fresh(thumb: &Path, source: &Path) -> bool {
    let thumb_time = std::fs::metadata(thumb)
        .ok()
        .filter(|m| m.is_file() && m.len() > 0)
        .and_then(|m| m.modified().ok());
    let source_time = std::fs::metadata(source).and_then(|m| m.modified()).ok();
    matches!((thumb_time, source_time), (Some(t), Some(s)) if t >= s)
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

/// Why a thumbnail is missing.
#[derive(Debug)]
enum ThumbError {
    /// The screenshot could not be read or decoded.
    Read(String),
    /// The thumbnail could not be encoded or written (a full disk, say).
    Write(String),
}

fn make_one(source: &Path, thumb: &Path) -> Result<(), ThumbError> {
    if is_fresh(thumb, source) {
        return Ok(());
    }
    let read = |e: &dyn std::fmt::Display| ThumbError::Read(format!("{}: {e}", source.display()));
    let img = image::ImageReader::open(source)
        .and_then(|r| r.with_guessed_format())
        .map_err(|e| read(&e))?
        .decode()
        .map_err(|e| read(&e))?
        .to_rgb8();
    let small = if img.width() > THUMB_WIDTH {
        downscale(&img, THUMB_WIDTH)
    } else {
        img
    };
    let (w, h) = (
        u16::try_from(small.width()).map_err(|_| read(&"image too large"))?,
        u16::try_from(small.height()).map_err(|_| read(&"image too tall for a JPEG thumbnail"))?,
    );
    // Encoded in memory and published by a rename only once written whole, so a failed write (a full disk)
    // leaves neither a temporary file nor a truncated thumbnail that a later report would reuse.
    let mut jpeg = Vec::new();
    let write = |e: &dyn std::fmt::Display| ThumbError::Write(format!("{}: {e}", thumb.display()));
    let mut encoder = jpeg_encoder::Encoder::new(&mut jpeg, QUALITY);
    encoder.set_sampling_factor(jpeg_encoder::SamplingFactor::F_2_2);
    encoder
        .encode(small.as_raw(), w, h, jpeg_encoder::ColorType::Rgb)
        .map_err(|e| write(&e))?;
    let tmp = thumb.with_extension(format!("{TMP_MARK}{}", std::process::id()));
    crate::safe_io::replace_atomic(thumb, &tmp, &jpeg).map_err(|e| write(&e))
}

/// The extension prefix of a thumbnail being written (`<hash>.tmp-<pid>`).
const TMP_MARK: &str = "tmp-";

/// Remove the temporary files a killed report left in `dir`.
fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        let is_tmp = Path::new(&name)
            .extension()
            .is_some_and(|x| x.to_string_lossy().starts_with(TMP_MARK));
        if is_tmp {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Thumbnails of `images` (paths relative to `root`) in `out/report/`: image path → URL relative to `out`,
/// `None` for a screenshot that could not be read (logged as a warning; the page says so).
pub(crate) fn make_thumbnails<'a>(
    root: &Path,
    images: impl IntoIterator<Item = &'a str>,
    out: &Path,
) -> Result<HashMap<String, Option<String>>, ReportError> {
    let dir = out.join(THUMB_DIR);
    std::fs::create_dir_all(&dir).map_err(|source| ReportError::Io {
        path: dir.clone(),
        source,
    })?;
    remove_stale_temporaries(&dir);
    let unique: Vec<&str> = images
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let made: Vec<(&str, Result<String, ThumbError>)> = unique
        .par_iter()
        .map(|&image| {
            let name = thumb_name(image);
            let made = make_one(&root.join(image), &dir.join(&name))
                .map(|()| format!("{THUMB_DIR}/{name}"));
            (image, made)
        })
        .collect();
    // One warning per kind of failure for all screenshots (a benchmark copied without its images has thousands).
    let reads: Vec<&String> = made
        .iter()
        .filter_map(|(_, r)| match r {
            Err(ThumbError::Read(m)) => Some(m),
            _ => None,
        })
        .collect();
    let writes: Vec<&String> = made
        .iter()
        .filter_map(|(_, r)| match r {
            Err(ThumbError::Write(m)) => Some(m),
            _ => None,
        })
        .collect();
    if let Some(first) = reads.first() {
        tracing::warn!(
            "report: {} screenshot(s) could not be read, shown without image (first: {first})",
            reads.len()
        );
    }
    if let Some(first) = writes.first() {
        tracing::warn!(
            "report: {} thumbnail(s) could not be written, shown without image (first: {first})",
            writes.len()
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
    fn a_failed_write_leaves_no_file_and_is_named_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("s.png");
        image::RgbImage::from_pixel(40, 80, image::Rgb([9, 9, 9]))
            .save(&source)
            .unwrap();
        // A folder where the thumbnail should go: the rename fails as a full disk's write would.
        let thumb = dir.path().join("t.jpg");
        std::fs::create_dir(&thumb).unwrap();
        std::fs::write(thumb.join("x"), "keeps the folder non-empty").unwrap();
        assert!(matches!(
            make_one(&source, &thumb),
            Err(ThumbError::Write(_))
        ));
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(
            left.len(),
            2,
            "only the screenshot and the folder: no temporary file"
        );
        assert!(matches!(
            make_one(&dir.path().join("absent.png"), &dir.path().join("u.jpg")),
            Err(ThumbError::Read(_))
        ));
        std::fs::write(dir.path().join("v.tmp-99"), "").unwrap();
        remove_stale_temporaries(dir.path());
        assert!(!dir.path().join("v.tmp-99").exists());
    }

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
