//! The scripted trajectories of the sample benchmark (Chinese apps and instructions).

use image::Rgb;

use super::draw::Page;
use super::{Act, StepSpec, TrajSpec};
use crate::action::{Action, Button, Status};

fn step(
    page: Page,
    target: Option<&'static str>,
    act: Act,
    thought: &'static str,
    subtask: &'static str,
) -> StepSpec {
    StepSpec {
        page,
        target,
        act,
        thought,
        subtask,
    }
}

fn click(
    page: Page,
    target: &'static str,
    thought: &'static str,
    subtask: &'static str,
) -> StepSpec {
    step(page, Some(target), Act::Click, thought, subtask)
}

fn plain(page: Page, a: Action, thought: &'static str, subtask: &'static str) -> StepSpec {
    step(page, None, Act::Plain(a), thought, subtask)
}

fn done(page: Page, status: Status, thought: &'static str, subtask: &'static str) -> StepSpec {
    plain(page, Action::Terminate { status }, thought, subtask)
}

fn taobao() -> TrajSpec {
    TrajSpec {
        app: "淘宝",
        accent: Rgb([255, 80, 0]),
        instruction: "打开淘宝，搜索蓝牙耳机并查看第一个商品的详情",
        steps: vec![
            plain(
                Page::Launcher,
                Action::Open {
                    text: "淘宝".into(),
                },
                "当前在手机桌面，需要先打开淘宝应用，以便搜索商品。",
                "打开淘宝应用",
            ),
            click(
                Page::Feed,
                "search",
                "已进入淘宝首页，下一步点击顶部的搜索框，以便输入商品名称。",
                "点击顶部搜索框",
            ),
            plain(
                Page::Search(false),
                Action::Type {
                    text: "蓝牙耳机".into(),
                },
                "搜索框已激活且键盘已弹出，下一步输入“蓝牙耳机”，以便搜索目标商品。",
                "在搜索框中输入“蓝牙耳机”",
            ),
            plain(
                Page::Search(true),
                Action::SystemButton {
                    button: Button::Enter,
                },
                "已输入关键词，下一步按回车键提交搜索，以便查看搜索结果。",
                "按回车键开始搜索",
            ),
            click(
                Page::Results,
                "row0",
                "搜索结果已显示，下一步点击第一个商品，以便查看商品详情。",
                "点击第一个商品",
            ),
            done(
                Page::Detail,
                Status::Success,
                "已打开第一个商品的详情页，任务已完成。",
                "任务完成",
            ),
        ],
    }
}

fn wechat() -> TrajSpec {
    TrajSpec {
        app: "微信",
        accent: Rgb([7, 193, 96]),
        instruction: "在微信中给张三发送消息：晚上一起吃饭",
        steps: vec![
            click(
                Page::ChatList,
                "row1",
                "当前在微信聊天列表，张三位于第二行，下一步点击进入与张三的聊天。",
                "点击张三的聊天",
            ),
            click(
                Page::Chat(false),
                "input",
                "已进入与张三的聊天界面，下一步点击底部输入框，以便输入消息。",
                "点击底部输入框",
            ),
            plain(
                Page::Chat(true),
                Action::Type {
                    text: "晚上一起吃饭".into(),
                },
                "输入框已激活，下一步输入消息内容“晚上一起吃饭”。",
                "输入“晚上一起吃饭”",
            ),
            click(
                Page::Chat(true),
                "send",
                "消息已输入完毕，下一步点击发送按钮，以便把消息发给张三。",
                "点击发送按钮",
            ),
            done(
                Page::Chat(false),
                Status::Success,
                "消息已成功发送给张三，任务完成。",
                "任务完成",
            ),
        ],
    }
}

fn settings() -> TrajSpec {
    TrajSpec {
        app: "设置",
        accent: Rgb([52, 120, 246]),
        instruction: "打开设置，把屏幕亮度调到最高，然后调高音量",
        steps: vec![
            click(
                Page::Launcher,
                "app5",
                "当前在手机桌面，设置图标位于第二行第二列，下一步点击打开设置。",
                "点击设置图标",
            ),
            step(
                Page::Settings(false),
                None,
                Act::Swipe([360.0, 1200.0], [360.0, 500.0]),
                "已进入设置，首屏没有显示与亮度选项，下一步向上滑动列表，以便找到该选项。",
                "向上滑动设置列表",
            ),
            click(
                Page::Settings(true),
                "row3",
                "已看到“显示与亮度”选项，下一步点击进入，以便调节亮度。",
                "点击“显示与亮度”",
            ),
            step(
                Page::Brightness,
                None,
                Act::Swipe([254.0, 400.0], [650.0, 400.0]),
                "已进入亮度设置，下一步把亮度滑块向右拖到最右端，以便把亮度调到最高。",
                "向右拖动亮度滑块",
            ),
            plain(
                Page::Brightness,
                Action::Key {
                    text: "volume_up".into(),
                },
                "亮度已调到最高，下一步按音量加键，以便调高音量。",
                "按音量加键",
            ),
            done(
                Page::Brightness,
                Status::Success,
                "亮度已调到最高且音量已调高，任务完成。",
                "任务完成",
            ),
        ],
    }
}

fn gallery() -> TrajSpec {
    TrajSpec {
        app: "相册",
        accent: Rgb([142, 68, 173]),
        instruction: "在相册中删除最新的一张照片",
        steps: vec![
            plain(
                Page::Launcher,
                Action::Open {
                    text: "相册".into(),
                },
                "当前在手机桌面，需要先打开相册应用。",
                "打开相册应用",
            ),
            step(
                Page::Photos(false),
                Some("photo0"),
                Act::LongPress(2.0),
                "已进入相册，最新的照片在左上角，下一步长按该照片，以便进入多选模式。",
                "长按左上角的最新照片",
            ),
            click(
                Page::Photos(true),
                "delete",
                "已选中最新的照片，下一步点击底部的删除按钮。",
                "点击删除按钮",
            ),
            click(
                Page::Dialog,
                "confirm",
                "弹出了删除确认对话框，下一步点击“删除”确认。",
                "点击确认删除",
            ),
            plain(
                Page::Photos(false),
                Action::Wait { time: Some(1.0) },
                "删除正在进行，下一步等待一秒，以便确认照片已被删除。",
                "等待删除完成",
            ),
            plain(
                Page::Photos(false),
                Action::SystemButton {
                    button: Button::Home,
                },
                "照片已删除，下一步按主页键返回桌面。",
                "返回桌面",
            ),
            done(
                Page::Launcher,
                Status::Success,
                "最新的照片已删除并已返回桌面，任务完成。",
                "任务完成",
            ),
        ],
    }
}

fn meituan() -> TrajSpec {
    TrajSpec {
        app: "美团",
        accent: Rgb([255, 196, 0]),
        instruction: "用美团查找附近评分最高的火锅店并收藏",
        steps: vec![
            click(Page::Feed, "search", "当前在美团首页，下一步点击顶部搜索框，以便搜索火锅店。", "点击搜索框"),
            plain(Page::Search(false), Action::Type { text: "火锅".into() },
                "搜索框已激活，下一步输入“火锅”。", "输入“火锅”"),
            click(Page::Search(true), "search_button", "关键词已输入，下一步点击右侧的搜索按钮。", "点击搜索按钮"),
            step(Page::Results, None, Act::Swipe([600.0, 298.0], [150.0, 298.0]),
                "搜索结果已显示，但没有看到“评分最高”的筛选项，下一步向左滑动筛选栏，以便查看更多筛选项。",
                "向左滑动筛选栏"),
            step(Page::Results, None, Act::Swipe([360.0, 600.0], [360.0, 1300.0]),
                "筛选栏中仍没有评分排序，下一步下拉刷新结果列表。", "下拉刷新结果列表"),
            done(Page::Results, Status::Failure, "多次尝试后仍无法按评分排序，也无法收藏店铺，任务无法完成。", "任务失败，结束"),
        ],
    }
}

/// The five sample trajectories (30 steps).
pub(super) fn trajectories() -> Vec<TrajSpec> {
    vec![taobao(), wechat(), settings(), gallery(), meituan()]
}
