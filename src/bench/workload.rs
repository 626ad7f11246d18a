//! Synthetic Mobile-R1-like workload for `bench`: trajectories of four steps on 1080×2400 and 720×1600 phone
//! screens (drawn: status bar, search box, list rows, tab bar), with instructions and golden histories of
//! realistic length.

use std::path::Path;

use anyhow::Result;
use image::{Rgb, RgbImage};

use crate::action::{Action, Status};
use crate::dataset::{Benchmark, Step, Trajectory};

const SCREENS: [(u32, u32); 2] = [(1080, 2400), (720, 1600)];
const STEPS_PER_TRAJECTORY: usize = 4;

fn fill_rect(img: &mut RgbImage, x0: u32, y0: u32, x1: u32, y1: u32, c: [u8; 3]) {
    for y in y0..y1.min(img.height()) {
        for x in x0..x1.min(img.width()) {
            img.put_pixel(x, y, Rgb(c));
        }
    }
}

/// A phone-like screen, different per `(trajectory, step)`.
fn draw_screen(w: u32, h: u32, t: usize, s: usize) -> RgbImage {
    let mut img = RgbImage::from_pixel(w, h, Rgb([246, 246, 248]));
    let u = h / 40;
    let hue = [
        (t * 53 + s * 29) as u8,
        (t * 97) as u8,
        (200 - s * 40) as u8,
    ];
    fill_rect(&mut img, 0, 0, w, u, [30, 30, 30]);
    fill_rect(&mut img, 0, u, w, 3 * u, hue);
    fill_rect(
        &mut img,
        w / 20,
        4 * u,
        w - w / 20,
        5 * u + u / 2,
        [255, 255, 255],
    );
    for row in 0..((h - 12 * u) / (3 * u)) {
        let y = 7 * u + row * 3 * u;
        let shade = 225 - ((row as usize + s) % 4) as u8 * 12;
        fill_rect(&mut img, w / 20, y, w / 20 + 2 * u, y + 2 * u, hue);
        fill_rect(
            &mut img,
            w / 20 + 3 * u,
            y + u / 3,
            w - w / 5,
            y + u,
            [shade, shade, shade],
        );
        fill_rect(
            &mut img,
            w / 20 + 3 * u,
            y + 4 * u / 3,
            w / 2,
            y + 5 * u / 3,
            [200, 200, 205],
        );
    }
    fill_rect(&mut img, 0, h - 3 * u, w, h, [255, 255, 255]);
    img
}

fn step(image: String, i: usize, w: u32, h: u32) -> Step {
    let action = match i {
        0 => Action::Click {
            coordinate: [w as f64 / 2.0, h as f64 / 8.0],
        },
        1 => Action::Type {
            text: "无线蓝牙耳机 降噪".into(),
        },
        2 => Action::Swipe {
            coordinate: [w as f64 / 2.0, h as f64 * 0.8],
            coordinate2: [w as f64 / 2.0, h as f64 * 0.3],
        },
        _ => Action::Terminate {
            status: Status::Success,
        },
    };
    Step {
        image,
        thought: "当前在首页，需要先进入搜索框再输入商品名称。".into(),
        subtask: format!(
            "第{}步：点击页面上方的搜索框，输入要查找的商品并查看结果列表",
            i + 1
        ),
        action,
        response: String::new(),
        bboxes: Vec::new(),
        instruction: None,
    }
}

/// Write `n_steps` step screenshots (rounded up to whole trajectories) under `dir/images` and return the
/// benchmark (not written as `data.jsonl`: the engine takes it in memory).
pub fn write(dir: &Path, n_steps: usize) -> Result<Benchmark> {
    std::fs::create_dir_all(dir.join(crate::dataset::IMAGES_DIR))?;
    let n_traj = n_steps.div_ceil(STEPS_PER_TRAJECTORY).max(1);
    let mut trajectories = Vec::with_capacity(n_traj);
    for t in 0..n_traj {
        let (w, h) = SCREENS[t % SCREENS.len()];
        let mut steps = Vec::new();
        for s in 0..STEPS_PER_TRAJECTORY {
            let name = format!("{}/t{t}_s{s}.png", crate::dataset::IMAGES_DIR);
            draw_screen(w, h, t, s).save(dir.join(&name))?;
            steps.push(step(name, s, w, h));
        }
        trajectories.push(Trajectory {
            id: t.to_string(),
            line: t + 1,
            app_name: "淘宝".into(),
            instruction: "打开淘宝，搜索无线蓝牙降噪耳机，按销量排序后查看第一个商品的详情和评价"
                .into(),
            system: None,
            image_width: w,
            image_height: h,
            steps,
        });
    }
    Ok(Benchmark {
        root: dir.to_path_buf(),
        trajectories,
        info: None,
    })
}
