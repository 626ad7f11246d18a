//! `smart_resize`: the target size of a picture, exactly as transformers' `qwen2_vl` `smart_resize`.

use super::PreprocessError;

/// Largest allowed ratio of the long side to the short side.
pub const MAX_ASPECT_RATIO: f64 = 200.0;

/// Returns `(height, width)`, both multiples of `factor`, with `min_pixels <= h·w <= max_pixels` where possible
/// and the aspect ratio kept as close as possible, exactly as transformers computes it:
///
/// * round each side to the nearest multiple of `factor` with Python's `round` (ties to even: 70 / 28 = 2.5
///   → 56, not 84);
/// * if that exceeds `max_pixels`, scale both sides down by `sqrt(h·w / max_pixels)` and floor to the factor
///   (at least `factor`);
/// * if it is below `min_pixels`, scale up by `sqrt(min_pixels / (h·w))` and ceil to the factor.
///
/// Errors when a side is zero, `factor` is zero, or `max(h, w) / min(h, w) > 200` (as transformers does).
pub fn smart_resize(
    height: usize,
    width: usize,
    factor: usize,
    min_pixels: u64,
    max_pixels: u64,
) -> Result<(usize, usize), PreprocessError> {
    if height == 0 || width == 0 || factor == 0 {
        return Err(PreprocessError::BadSize {
            height,
            width,
            reason: "sides and factor must be non-zero".into(),
        });
    }
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    let ratio = h.max(w) / h.min(w);
    if ratio > MAX_ASPECT_RATIO {
        return Err(PreprocessError::BadSize {
            height,
            width,
            reason: format!(
                "absolute aspect ratio must be smaller than {MAX_ASPECT_RATIO}, got {ratio}"
            ),
        });
    }
    let mut h_bar = (h / f).round_ties_even() * f;
    let mut w_bar = (w / f).round_ties_even() * f;
    if h_bar * w_bar > max_pixels as f64 {
        let beta = (h * w / max_pixels as f64).sqrt();
        h_bar = f.max((h / beta / f).floor() * f);
        w_bar = f.max((w / beta / f).floor() * f);
    } else if h_bar * w_bar < min_pixels as f64 {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        h_bar = (h * beta / f).ceil() * f;
        w_bar = (w * beta / f).ceil() * f;
    }
    Ok((h_bar as usize, w_bar as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HUB_MAX: u64 = 12_845_056;
    const CAP: u64 = 1280 * 28 * 28;

    #[test]
    fn brief_table() {
        let cases = [
            ((224, 224), (224, 224), (224, 224)),
            ((448, 448), (448, 448), (448, 448)),
            ((480, 640), (476, 644), (476, 644)),
            ((720, 1280), (728, 1288), (728, 1288)),
            ((1080, 1920), (1092, 1932), (728, 1316)),
            ((2048, 2048), (2044, 2044), (980, 980)),
            ((3000, 4000), (2996, 4004), (840, 1148)),
            ((1000, 2000), (1008, 1988), (700, 1400)),
        ];
        for ((h, w), hub, cap) in cases {
            assert_eq!(
                smart_resize(h, w, 28, 3136, HUB_MAX).unwrap(),
                hub,
                "{h}x{w} hub"
            );
            assert_eq!(
                smart_resize(h, w, 28, 3136, CAP).unwrap(),
                cap,
                "{h}x{w} cap"
            );
        }
    }

    #[test]
    fn ties_round_to_even() {
        // 70/28 = 2.5 -> 2 (even), 126/28 = 4.5 -> 4, 98/28 = 3.5 -> 4.
        assert_eq!(smart_resize(70, 126, 28, 0, HUB_MAX).unwrap(), (56, 112));
        assert_eq!(smart_resize(98, 98, 28, 0, HUB_MAX).unwrap(), (112, 112));
    }

    #[test]
    fn min_branch_and_tiny_sides() {
        assert_eq!(smart_resize(10, 10, 28, 3136, HUB_MAX).unwrap(), (56, 56));
        assert_eq!(smart_resize(1, 20, 28, 3136, HUB_MAX).unwrap(), (28, 252));
    }

    #[test]
    fn aspect_ratio_limit() {
        assert!(smart_resize(1, 201, 28, 3136, HUB_MAX).is_err());
        assert!(smart_resize(1, 200, 28, 3136, HUB_MAX).is_ok());
        assert!(smart_resize(0, 10, 28, 3136, HUB_MAX).is_err());
    }
}
