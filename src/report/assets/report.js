// Builds the trajectory browser of report.html / compare.html from the JSON data block. Every string from the
// data is inserted with textContent or setAttribute, never as markup.
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('report-data').textContent);
  var NS = 'http://www.w3.org/2000/svg';
  var OUTCOME = { correct: 'correct', args_error: 'wrong args', type_error: 'wrong type', format_error: 'format error' };
  var GOLD = '#16a34a', PRED = '#dc2626', PRED2 = '#7c3aed';

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function sv(tag, attrs) {
    var e = document.createElementNS(NS, tag);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, String(attrs[k])); });
    return e;
  }
  function label(g, x, y, text, color, size) {
    var t = sv('text', { x: x, y: y, fill: color, 'font-size': size, 'font-weight': 'bold', stroke: '#fff',
      'stroke-width': size / 6, 'paint-order': 'stroke', 'font-family': 'sans-serif' });
    t.textContent = text;
    g.appendChild(t);
  }
  function arrow(g, a, b, color, w) {
    var line = { x1: a[0], y1: a[1], x2: b[0], y2: b[1], stroke: color, 'stroke-width': w / 90, 'stroke-linecap': 'round' };
    g.appendChild(sv('line', line));
    var ang = Math.atan2(b[1] - a[1], b[0] - a[0]), s = w / 22;
    var p = [b, [b[0] - s * Math.cos(ang - 0.45), b[1] - s * Math.sin(ang - 0.45)],
      [b[0] - s * Math.cos(ang + 0.45), b[1] - s * Math.sin(ang + 0.45)]];
    g.appendChild(sv('polygon', { points: p.map(function (q) { return q.join(','); }).join(' '), fill: color }));
  }
  // The text label of an action: its text argument, or its type when it has no point.
  function caption(a, tag) {
    var text = a.text !== undefined ? a.type + ': ' + a.text : (a.point ? '' : a.type);
    return text ? tag + ' ' + text : '';
  }
  // A predicted action: a dot, a swipe arrow, and its label in row `row` from the bottom.
  function drawAction(g, a, color, w, h, tag, row) {
    var off = false;
    if (a.to) {
      arrow(g, a.point, a.to, color, w);
    } else if (a.point) {
      // A point off the screen is drawn hollow at the nearest edge.
      var x = Math.min(w, Math.max(0, a.point[0])), y = Math.min(h, Math.max(0, a.point[1]));
      off = x !== a.point[0] || y !== a.point[1];
      g.appendChild(sv('circle', { cx: x, cy: y, r: w / 45, fill: off ? 'none' : color, 'fill-opacity': 0.85,
        stroke: off ? color : '#fff', 'stroke-width': off ? w / 100 : w / 200 }));
    }
    var text = off ? tag + ' ' + a.type + ' (off screen)' : caption(a, tag), size = w / 20;
    if (text) label(g, w * 0.03, h - size * (0.6 + 1.3 * row), text, color, size);
  }
  function overlay(s, preds) {
    var w = s.w, h = s.h, g = sv('svg', { viewBox: '0 0 ' + w + ' ' + h, preserveAspectRatio: 'none' });
    var gold = s.gold;
    (gold.boxes || []).forEach(function (b) {
      g.appendChild(sv('rect', { x: b[0], y: b[1], width: b[2] - b[0], height: b[3] - b[1], fill: GOLD,
        'fill-opacity': 0.12, stroke: GOLD, 'stroke-width': w / 150 }));
      if (gold.scale !== 1) {
        var cx = (b[0] + b[2]) / 2, cy = (b[1] + b[3]) / 2, hw = (b[2] - b[0]) / 2 * gold.scale, hh = (b[3] - b[1]) / 2 * gold.scale;
        g.appendChild(sv('rect', { x: cx - hw, y: cy - hh, width: 2 * hw, height: 2 * hh, fill: 'none', stroke: GOLD,
          'stroke-width': w / 300, 'stroke-dasharray': w / 60 }));
      }
    });
    if (gold.radii && gold.point) {
      g.appendChild(sv('ellipse', { cx: gold.point[0], cy: gold.point[1], rx: gold.radii[0], ry: gold.radii[1], fill: 'none',
        stroke: GOLD, 'stroke-width': w / 250, 'stroke-dasharray': w / 50 }));
    }
    if (gold.point && !gold.to) {
      var p = gold.point, r = w / 30;
      g.appendChild(sv('path', { d: 'M' + (p[0] - r) + ' ' + p[1] + 'h' + 2 * r + 'M' + p[0] + ' ' + (p[1] - r) + 'v' + 2 * r,
        stroke: GOLD, 'stroke-width': w / 120 }));
    }
    if (gold.to) arrow(g, gold.point, gold.to, GOLD, w);
    var row = 0, goldText = caption(gold, 'gold');
    if (goldText) label(g, w * 0.03, h - (w / 20) * (0.6 + 1.3 * row++), goldText, GOLD, w / 20);
    preds.forEach(function (p) { if (p.pred) drawAction(g, p.pred, p.color, w, h, p.tag, row++); });
    return g;
  }
  function shot(s, preds) {
    var box = el('div', 'shot');
    if (s.img) {
      var img = el('img');
      img.loading = 'lazy';
      img.decoding = 'async';
      img.alt = s.image;
      img.setAttribute('src', s.img);
      img.setAttribute('width', 400);
      img.setAttribute('height', Math.round(400 * s.h / s.w));
      box.appendChild(img);
    } else {
      box.appendChild(el('div', 'missing', 'screenshot not readable: ' + s.image));
    }
    box.appendChild(overlay(s, preds));
    return box;
  }
  function field(dl, name, value, pre) {
    if (value === undefined || value === null || value === '') return;
    dl.appendChild(el('dt', null, name));
    var dd = el('dd');
    dd.appendChild(pre ? el('pre', null, value) : document.createTextNode(String(value)));
    dl.appendChild(dd);
  }
  // A semi-online trajectory's stop: its first step that is not correct (null when every step is).
  function isStop(t, s) { return t.stop && t.stop.step === s.step; }
  function unreached(t, s) { return t.stop && t.stop.stopsEarly && t.stop.step !== null && s.step > t.stop.step && s.missing; }
  function stepCard(t, s) {
    var card = el('article', 'card' + (unreached(t, s) ? ' unreached' : '') + (isStop(t, s) ? ' stop' : ''));
    card.tabIndex = 0;
    card.dataset.outcome = s.outcome;
    card.dataset.type = s.gold.type;
    var head = el('div', 'head');
    head.appendChild(el('strong', null, 'step ' + s.step));
    var badges = el('span');
    if (isStop(t, s)) badges.appendChild(el('span', 'badge stop', 'first error'));
    badges.appendChild(el('span', 'badge ' + s.outcome, unreached(t, s) ? 'not reached' : (s.outcome2 ? 'A: ' : '') + OUTCOME[s.outcome]));
    if (s.outcome2) badges.appendChild(el('span', 'badge ' + s.outcome2, 'B: ' + OUTCOME[s.outcome2]));
    head.appendChild(badges);
    card.appendChild(head);
    var preds = s.outcome2 ? [{ pred: s.pred, color: PRED, tag: 'A' }, { pred: s.pred2, color: PRED2, tag: 'B' }]
      : [{ pred: s.pred, color: PRED, tag: 'pred' }];
    card.appendChild(shot(s, preds));
    var dl = el('dl');
    field(dl, 'gold', s.gold.desc);
    field(dl, 'sub-goal', s.subtask);
    field(dl, s.outcome2 ? 'A predicted' : 'predicted', s.pred ? s.pred.desc : (s.missing ? '(no prediction)' : '(none)'));
    field(dl, 'test', s.check);
    field(dl, 'parse error', s.parseError);
    field(dl, 'prediction error', s.error);
    field(dl, 'thought', s.think);
    field(dl, s.outcome2 ? 'A response' : 'response', s.response, true);
    if (s.outcome2) {
      field(dl, 'B predicted', s.pred2 ? s.pred2.desc : '(none)');
      field(dl, 'B test', s.check2);
      field(dl, 'B response', s.response2, true);
    }
    if (s.generatedTokens !== undefined && s.generatedTokens !== null)
      field(dl, 'tokens', s.promptTokens + ' prompt, ' + s.generatedTokens + ' generated');
    card.appendChild(dl);
    return card;
  }
  function judgeBadge(j) {
    if (!j) return null;
    if (j.success === true) return el('span', 'badge judge-ok', 'judge: success');
    if (j.success === false) return el('span', 'badge judge-bad', 'judge: failure');
    return el('span', 'badge judge-none', 'judge: unreadable');
  }
  var root = document.getElementById('trajectories');
  var entries = [];
  data.trajectories.forEach(function (t) {
    var sec = el('section', 'traj');
    sec.appendChild(el('h3', null, t.instruction));
    var meta = el('div', 'meta', 'trajectory ' + t.id + ' · ' + t.app + ' · ' + t.steps.length + ' steps ');
    if (t.stop) {
      var stopText = t.stop.step === null ? 'every step correct' :
        (t.stop.stopsEarly ? 'stopped at step ' + t.stop.step : 'first error at step ' + t.stop.step) +
        (t.stop.unparsable ? ' (unparsable reply)' : '');
      meta.appendChild(el('span', 'badge ' + (t.stop.step === null ? 'correct' : 'stop'),
        stopText + ' · progress ' + t.stop.progress + '/' + t.stop.steps));
      meta.appendChild(document.createTextNode(' '));
    }
    var jb = judgeBadge(t.judge);
    if (jb) meta.appendChild(jb);
    if (t.judge && t.judge.reason) meta.appendChild(el('span', null, ' ' + t.judge.reason));
    sec.appendChild(meta);
    var steps = el('div', 'steps');
    var cards = t.steps.map(function (s) {
      var c = stepCard(t, s);
      steps.appendChild(c);
      return { card: c, step: s };
    });
    sec.appendChild(steps);
    root.appendChild(sec);
    entries.push({ sec: sec, t: t, needle: (t.instruction + ' ' + t.id).toLowerCase(), cards: cards });
  });
  function val(id) { var e = document.getElementById(id); return e ? (e.type === 'checkbox' ? e.checked : e.value) : ''; }
  function apply() {
    var wrong = val('f-wrong'), app = val('f-app'), type = val('f-type'), outcome = val('f-outcome'), flip = val('f-flip');
    var q = String(val('f-search')).trim().toLowerCase(), shown = 0, total = 0;
    entries.forEach(function (e) {
      var any = false, trajOk = (!app || e.t.app === app) && (!q || e.needle.indexOf(q) >= 0);
      e.cards.forEach(function (c) {
        var s = c.step;
        var ok = trajOk && (!wrong || s.outcome !== 'correct' || (s.outcome2 && s.outcome2 !== 'correct')) &&
          (!type || s.gold.type === type) && (!flip || s.flip === flip) && (!outcome || s.outcome === outcome || s.outcome2 === outcome);
        c.card.classList.toggle('hidden', !ok);
        total += 1;
        if (ok) { shown += 1; any = true; }
      });
      e.sec.classList.toggle('hidden', !any);
    });
    var count = document.getElementById('f-count');
    if (count) count.textContent = shown + ' of ' + total + ' steps shown';
  }
  ['f-wrong', 'f-app', 'f-type', 'f-outcome', 'f-flip', 'f-search'].forEach(function (id) {
    var e = document.getElementById(id);
    if (e) { e.addEventListener('input', apply); e.addEventListener('change', apply); }
  });
  document.addEventListener('keydown', function (ev) {
    var tag = ev.target && ev.target.tagName;
    if (tag === 'INPUT' || tag === 'SELECT' || tag === 'TEXTAREA' || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (ev.key === '/') {
      var s = document.getElementById('f-search');
      if (s) { ev.preventDefault(); s.focus(); }
      return;
    }
    var dir = (ev.key === 'j' || ev.key === 'n') ? 1 : (ev.key === 'k' || ev.key === 'p') ? -1 : 0;
    if (!dir) return;
    var visible = Array.prototype.filter.call(document.querySelectorAll('.card'), function (c) { return c.offsetParent !== null; });
    if (!visible.length) return;
    var i = visible.indexOf(document.activeElement);
    var next = visible[i < 0 ? (dir > 0 ? 0 : visible.length - 1) : Math.min(visible.length - 1, Math.max(0, i + dir))];
    ev.preventDefault();
    next.focus();
    next.scrollIntoView({ block: 'center' });
  });
  apply();
  document.body.dataset.ready = 'yes';
}());
