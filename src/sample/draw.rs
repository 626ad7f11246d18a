//! Phone-screen drawings for the sample benchmark: status bar, app bar, list rows, buttons, keyboard.
//!
//! Text is drawn as grey bars (no fonts). Every page is a list of named rectangles, so the gold boxes of the
//! sample come from the same geometry that is drawn.

use image::{Rgb, RgbImage};

/// Screen width of the sample device.
pub(crate) const W: u32 = 720;
/// Screen height of the sample device.
pub(crate) const H: u32 = 1600;

/// A rectangle `[x, y, w, h]` in pixels.
pub(crate) type Rect = [u32; 4];

/// The pages the sample trajectories visit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Page {
    /// The home screen with a grid of app icons.
    Launcher,
    /// An app's home feed with a search box and list rows.
    Feed,
    /// A search page with the keyboard up; `true` when text was typed.
    Search(bool),
    /// A results list with filter tabs.
    Results,
    /// A product / shop detail page.
    Detail,
    /// A chat list.
    ChatList,
    /// A conversation; `true` with the keyboard up.
    Chat(bool),
    /// A settings list; `true` when scrolled.
    Settings(bool),
    /// The brightness page with a slider.
    Brightness,
    /// A photo grid; `true` in selection mode.
    Photos(bool),
    /// A confirmation dialog over the photo grid.
    Dialog,
}

const WHITE: Rgb<u8> = Rgb([255, 255, 255]);
const PAGE_BG: Rgb<u8> = Rgb([242, 242, 246]);
const TEXT: Rgb<u8> = Rgb([120, 120, 128]);
const LIGHT: Rgb<u8> = Rgb([200, 200, 206]);
const DARK: Rgb<u8> = Rgb([28, 28, 30]);

/// A page's named elements in drawing order.
pub(crate) struct Layout {
    elems: Vec<(&'static str, Rect, Rgb<u8>)>,
}

impl Layout {
    fn add(&mut self, name: &'static str, r: Rect, c: Rgb<u8>) {
        self.elems.push((name, r, c));
    }

    /// The rectangle of a named element.
    pub fn get(&self, name: &str) -> Option<Rect> {
        self.elems.iter().rev().find(|e| e.0 == name).map(|e| e.1)
    }
}

fn shade(c: Rgb<u8>, k: f32) -> Rgb<u8> {
    Rgb(c.0.map(|v| {
        (v as f32 + (255.0 - v as f32) * k)
            .round()
            .clamp(0.0, 255.0) as u8
    }))
}

fn palette(i: u32) -> Rgb<u8> {
    const P: [[u8; 3]; 8] = [
        [255, 80, 0],
        [7, 193, 96],
        [52, 120, 246],
        [255, 196, 0],
        [142, 68, 173],
        [120, 130, 140],
        [230, 57, 70],
        [0, 168, 198],
    ];
    Rgb(P[(i % 8) as usize])
}

fn text_lines(l: &mut Layout, x: u32, y: u32, widths: &[u32]) {
    for (i, &w) in widths.iter().enumerate() {
        l.add(
            "text",
            [x, y + i as u32 * 40, w, 22],
            if i == 0 { TEXT } else { LIGHT },
        );
    }
}

fn list_rows(l: &mut Layout, y0: u32, h: u32, n: u32, thumb: u32, seed: u32) {
    const ROWS: [&str; 8] = [
        "row0", "row1", "row2", "row3", "row4", "row5", "row6", "row7",
    ];
    for i in 0..n.min(8) {
        let y = y0 + i * (h + 12);
        l.add(ROWS[i as usize], [20, y, 680, h], WHITE);
        l.add(
            "thumb",
            [40, y + (h - thumb) / 2, thumb, thumb],
            shade(palette(i + seed), 0.25),
        );
        text_lines(
            l,
            60 + thumb,
            y + h / 2 - 40,
            &[380 - 7 * ((i + seed) % 5), 240],
        );
    }
}

fn keyboard(l: &mut Layout, y0: u32) {
    l.add("keyboard", [0, y0, W, 1520 - y0], Rgb([210, 213, 219]));
    for row in 0..4u32 {
        let y = y0 + 20 + row * 115;
        for k in 0..10u32 {
            l.add("key", [8 + k * 71, y, 62, 95], WHITE);
        }
    }
    l.add(
        "enter",
        [560, y0 + 20 + 3 * 115, 150, 95],
        Rgb([52, 120, 246]),
    );
}

fn search_box(l: &mut Layout, typed: bool, accent: Rgb<u8>, with_button: bool) {
    let w = if with_button { 520 } else { 660 };
    l.add("search", [30, 170, w, 70], WHITE);
    l.add(
        "text",
        [60, 194, if typed { 160 } else { 240 }, 22],
        if typed { DARK } else { LIGHT },
    );
    if with_button {
        l.add("search_button", [570, 170, 120, 70], accent);
    }
}

fn launcher(l: &mut Layout) {
    const ICONS: [&str; 20] = [
        "app0", "app1", "app2", "app3", "app4", "app5", "app6", "app7", "app8", "app9", "app10",
        "app11", "app12", "app13", "app14", "app15", "app16", "app17", "app18", "app19",
    ];
    for i in 0..20u32 {
        let (col, row) = (i % 4, i / 4);
        let (x, y) = (60 + col * 165, 200 + row * 210);
        l.add(ICONS[i as usize], [x, y, 120, 120], palette(i * 3 + 1));
        l.add("label", [x + 10, y + 135, 100, 20], WHITE);
    }
}

fn feed(l: &mut Layout, accent: Rgb<u8>) {
    search_box(l, false, accent, false);
    l.add("banner", [30, 260, 660, 260], shade(accent, 0.5));
    for i in 0..5u32 {
        l.add(
            "category",
            [42 + i * 132, 545, 100, 100],
            shade(palette(i + 2), 0.2),
        );
    }
    list_rows(l, 680, 140, 4, 110, 1);
    for i in 0..4u32 {
        l.add(
            "tab",
            [45 + i * 180, 1440, 90, 60],
            if i == 0 { accent } else { LIGHT },
        );
    }
}

fn search(l: &mut Layout, accent: Rgb<u8>, typed: bool) {
    search_box(l, typed, accent, true);
    for i in 0..6u32 {
        l.add(
            "history",
            [30 + (i % 3) * 220, 280 + (i / 3) * 80, 200, 56],
            WHITE,
        );
    }
    keyboard(l, 1000);
}

fn results(l: &mut Layout, accent: Rgb<u8>) {
    search_box(l, true, accent, true);
    for i in 0..5u32 {
        l.add(
            "filter",
            [20 + i * 140, 270, 124, 56],
            if i == 0 { shade(accent, 0.6) } else { WHITE },
        );
    }
    list_rows(l, 350, 170, 6, 140, 3);
}

fn detail(l: &mut Layout, accent: Rgb<u8>) {
    l.add("picture", [0, 150, W, 700], shade(accent, 0.35));
    text_lines(l, 40, 880, &[560, 420, 300]);
    l.add("price", [40, 1010, 180, 40], accent);
    l.add("fav", [20, 1430, 100, 80], LIGHT);
    l.add("cart", [380, 1430, 150, 80], Rgb([255, 160, 0]));
    l.add("buy", [540, 1430, 160, 80], Rgb([230, 57, 70]));
}

fn chat(l: &mut Layout, keyboard_up: bool) {
    for i in 0..4u32 {
        let (x, c) = if i % 2 == 0 {
            (30, WHITE)
        } else {
            (330, Rgb([149, 236, 105]))
        };
        l.add("bubble", [x, 190 + i * 150, 360, 100], c);
    }
    let y = if keyboard_up { 900 } else { 1420 };
    l.add("input_bar", [0, y, W, 100], Rgb([246, 246, 246]));
    l.add("input", [100, y + 15, 440, 70], WHITE);
    if keyboard_up {
        l.add("text", [120, y + 40, 200, 22], DARK);
        keyboard(l, 1000);
    }
    l.add("send", [560, y + 15, 130, 70], Rgb([7, 193, 96]));
}

fn brightness(l: &mut Layout, accent: Rgb<u8>) {
    l.add("panel", [20, 300, 680, 200], WHITE);
    l.add("slider", [60, 392, 600, 16], LIGHT);
    l.add("knob", [230, 376, 48, 48], accent);
    list_rows(l, 540, 120, 3, 70, 2);
}

fn content(l: &mut Layout, page: Page, accent: Rgb<u8>) {
    match page {
        Page::Launcher => launcher(l),
        Page::Feed => feed(l, accent),
        Page::Search(typed) => search(l, accent, typed),
        Page::Results => results(l, accent),
        Page::Detail => detail(l, accent),
        Page::ChatList => list_rows(l, 160, 130, 8, 96, 0),
        Page::Chat(kb) => chat(l, kb),
        Page::Settings(scrolled) => list_rows(l, 160, 130, 8, 80, if scrolled { 4 } else { 0 }),
        Page::Brightness => brightness(l, accent),
        Page::Photos(select) => photos(l, accent, select, false),
        Page::Dialog => photos(l, accent, true, true),
    }
}

fn photos(l: &mut Layout, accent: Rgb<u8>, select: bool, dialog: bool) {
    const PHOTOS: [&str; 12] = [
        "photo0", "photo1", "photo2", "photo3", "photo4", "photo5", "photo6", "photo7", "photo8",
        "photo9", "photo10", "photo11",
    ];
    for i in 0..12u32 {
        let r = [3 + (i % 3) * 239, 160 + (i / 3) * 242, 236, 236];
        l.add(
            PHOTOS[i as usize],
            r,
            shade(palette(i + 5), 0.15 * (i % 4) as f32),
        );
        if select {
            l.add(
                "check",
                [r[0] + 190, r[1] + 10, 36, 36],
                if i == 0 { accent } else { WHITE },
            );
        }
    }
    if select {
        l.add("toolbar", [0, 1420, W, 100], WHITE);
        l.add("share", [180, 1430, 140, 80], LIGHT);
        l.add("delete", [400, 1430, 140, 80], Rgb([230, 57, 70]));
    }
    if dialog {
        l.add("dialog", [80, 600, 560, 400], WHITE);
        text_lines(l, 120, 660, &[400, 300]);
        l.add("cancel", [100, 880, 250, 90], LIGHT);
        l.add("confirm", [370, 880, 250, 90], Rgb([230, 57, 70]));
    }
}

/// The layout of a page in an app with this accent colour.
pub fn layout(page: Page, accent: Rgb<u8>) -> Layout {
    let mut l = Layout {
        elems: Vec::with_capacity(128),
    };
    if page != Page::Launcher {
        l.add("app_bar", [0, 50, W, 100], accent);
        l.add("title", [40, 85, 220, 30], WHITE);
    }
    content(&mut l, page, accent);
    l
}

fn fill(img: &mut RgbImage, r: Rect, c: Rgb<u8>) {
    let x1 = (r[0] + r[2]).min(img.width());
    let y1 = (r[1] + r[3]).min(img.height());
    for y in r[1].min(y1)..y1 {
        for x in r[0].min(x1)..x1 {
            img.put_pixel(x, y, c);
        }
    }
}

/// Draw a page: background, content, status bar and navigation bar.
pub(crate) fn draw(page: Page, accent: Rgb<u8>) -> RgbImage {
    let mut img = RgbImage::from_pixel(W, H, PAGE_BG);
    if page == Page::Launcher {
        for y in 0..H {
            let t = y as f32 / H as f32;
            let c = Rgb([
                (40.0 + 60.0 * t) as u8,
                (70.0 + 40.0 * t) as u8,
                (140.0 - 30.0 * t) as u8,
            ]);
            fill(&mut img, [0, y, W, 1], c);
        }
    }
    let l = layout(page, accent);
    for &(_, r, c) in &l.elems {
        fill(&mut img, r, c);
    }
    if page == Page::Dialog {
        dim_outside(&mut img, [80, 600, 560, 400]);
    }
    fill(&mut img, [0, 0, W, 50], DARK);
    fill(&mut img, [24, 16, 70, 18], WHITE);
    fill(&mut img, [640, 16, 52, 18], WHITE);
    fill(&mut img, [0, 1520, W, 80], Rgb([0, 0, 0]));
    fill(&mut img, [150, 1548, 30, 24], LIGHT);
    fill(&mut img, [345, 1545, 30, 30], LIGHT);
    fill(&mut img, [545, 1548, 26, 26], LIGHT);
    img
}

fn dim_outside(img: &mut RgbImage, keep: Rect) {
    for (x, y, p) in img.enumerate_pixels_mut() {
        let inside = x >= keep[0] && x < keep[0] + keep[2] && y >= keep[1] && y < keep[1] + keep[3];
        if !inside {
            p.0 = p.0.map(|v| v / 2);
        }
    }
}
