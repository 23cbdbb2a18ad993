// The layout check of tests/e2e/test_admin_layout.py, run in the page (execute_script):
// returns a list of problems, each a sentence naming the elements, or [] when the page
// is clean. Three kinds:
//   overflow - text (or a box) overflowing the box that holds it, shown spilling over
//              its neighbours or clipped (overflow visible or hidden, not auto/scroll);
//              a deliberate ellipsis (text-overflow: ellipsis with the whole text in a
//              title) is allowed;
//   wide     - the document wider than the viewport (the body scrolls sideways); a box
//              inside a wrapper that scrolls sideways itself (overflow-x auto/scroll)
//              is allowed only where arguments[0].scrollers is true (the phone), and a
//              <pre> may always scroll inside its own box;
//   overlap  - two runs of text whose rectangles overlap, or that sit in different boxes
//              on the same line less than GAP px apart (headings that run together
//              "RUNNINGSTARTED", a label over its value).
const options = arguments[0] || {};
const SLACK = 1; // px of rounding tolerated
const GAP = 4; // px at least between the text of two boxes side by side
const problems = [];
const viewport = document.documentElement.clientWidth;

function describe(el) {
  const parts = [];
  for (let node = el; node && node !== document.body && parts.length < 3; node = node.parentElement) {
    let part = node.tagName.toLowerCase();
    if (node.id) part += "#" + node.id;
    const classes = Array.from(node.classList || []).slice(0, 2);
    if (classes.length) part += "." + classes.join(".");
    parts.unshift(part);
    if (node.id) break;
  }
  const text = (el.textContent || "").replace(/\s+/g, " ").trim().slice(0, 50);
  return parts.join(" > ") + (text ? ` "${text}"` : "");
}

function visible(el) {
  const style = getComputedStyle(el);
  if (style.visibility === "hidden" || style.display === "none" || !el.getClientRects().length) {
    return false;
  }
  for (let node = el; node && node !== document.body; node = node.parentElement) {
    // Text for screen readers only (Django's .visually-hidden: clipped to nothing).
    const own = getComputedStyle(node);
    if ((own.clip !== "auto" && own.position === "absolute") || own.clipPath !== "none") return false;
    // The folded part of a closed <details> (all but its summary).
    const parent = node.parentElement;
    if (parent && parent.tagName === "DETAILS" && !parent.open && node.tagName !== "SUMMARY") {
      return false;
    }
  }
  return true;
}

function scrolls(style) {
  return style.overflowX === "auto" || style.overflowX === "scroll";
}

function insideScroller(el) {
  for (let node = el.parentElement; node && node !== document.body; node = node.parentElement) {
    if (scrolls(getComputedStyle(node))) return true;
  }
  return false;
}

function ellipsisWithTitle(el) {
  for (let node = el; node && node !== document.body; node = node.parentElement) {
    const style = getComputedStyle(node);
    if (style.textOverflow === "ellipsis") return Boolean(node.closest("[title]"));
    if (style.display !== "inline") return false;
  }
  return false;
}

function box(el) {
  // The box that lays out an inline element's text: its nearest non-inline ancestor.
  let node = el;
  while (node.parentElement && getComputedStyle(node).display === "inline") node = node.parentElement;
  return node;
}

function flow(el) {
  // The box whose lines an element's text flows in: inline blocks (buttons, badges) sit
  // in the line of the text around them.
  let node = el;
  while (node.parentElement && /^inline/.test(getComputedStyle(node).display)) node = node.parentElement;
  return node;
}

const SKIP = "script, style, noscript, template, title, option, select, textarea";

// -- runs of text: each text node's line boxes, clipped by the boxes that clip it ------------
const runs = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  const el = node.parentElement;
  if (!el || !node.textContent.trim() || el.closest(SKIP) || !visible(el)) continue;
  const range = document.createRange();
  range.selectNodeContents(node);
  const lines = Array.from(range.getClientRects()).filter((r) => r.width > 0.5 && r.height > 0.5);
  if (!lines.length) continue;
  const holder = box(el);
  const outer = holder.getBoundingClientRect();
  for (const line of lines) {
    const spills = line.right > outer.right + SLACK || line.left < outer.left - SLACK;
    if (spills && !ellipsisWithTitle(el)) {
      const over = Math.round(Math.max(line.right - outer.right, outer.left - line.left));
      problems.push(`overflow: text of ${describe(el)} runs ${over} px outside ${describe(holder)}`);
      break;
    }
  }
  const shown = [];
  for (const line of lines) {
    let [left, top, right, bottom] = [line.left, line.top, line.right, line.bottom];
    for (let clip = el; clip && clip !== document.documentElement; clip = clip.parentElement) {
      const style = getComputedStyle(clip);
      if (style.overflowX === "visible" && style.overflowY === "visible") continue;
      const r = clip.getBoundingClientRect();
      if (style.overflowX !== "visible") [left, right] = [Math.max(left, r.left), Math.min(right, r.right)];
      if (style.overflowY !== "visible") [top, bottom] = [Math.max(top, r.top), Math.min(bottom, r.bottom)];
    }
    if (right - left > SLACK && bottom - top > SLACK) shown.push({ left, top, right, bottom });
  }
  if (shown.length) runs.push({ el, line: flow(el), shown });
}

// -- boxes whose content is wider than they are, neither scrolling nor deliberately clipped -
// (the innermost such box only: its ancestors overflow because of it)
const overflowing = [];
for (const el of document.body.querySelectorAll("*")) {
  if (el.closest(SKIP) || el.closest("svg") || !visible(el)) continue;
  const style = getComputedStyle(el);
  if (style.display === "inline" || el.clientWidth === 0) continue;
  if (el.scrollWidth <= el.clientWidth + SLACK || ellipsisWithTitle(el)) continue;
  if (scrolls(style)) {
    if (!options.scrollers && el.tagName !== "PRE") {
      problems.push(
        `wide: ${describe(el)} scrolls sideways (content ${el.scrollWidth - el.clientWidth} px wider)`
      );
    }
  } else {
    overflowing.push(el);
  }
}
for (const el of overflowing) {
  if (overflowing.some((other) => other !== el && el.contains(other))) continue;
  const how = getComputedStyle(el).overflowX === "visible" ? "spills out of" : "is clipped by";
  // Name what sticks out furthest, to point at the culprit.
  const edge = el.getBoundingClientRect().left + el.clientWidth;
  let furthest = null;
  for (const inner of el.querySelectorAll("*")) {
    const right = inner.getBoundingClientRect().right;
    if (visible(inner) && right > edge + SLACK && (!furthest || right > furthest.right)) {
      furthest = { inner, right };
    }
  }
  const culprit = furthest ? ` (furthest: ${describe(furthest.inner)})` : "";
  problems.push(
    `overflow: content ${el.scrollWidth - el.clientWidth} px wider than ${describe(el)} ${how} it${culprit}`
  );
}

// -- the document wider than the viewport ---------------------------------------------------
const width = document.documentElement.scrollWidth;
if (width > viewport + SLACK) {
  const culprits = [];
  for (const el of document.body.querySelectorAll("*")) {
    if (!visible(el) || insideScroller(el)) continue;
    const right = el.getBoundingClientRect().right;
    const parent = el.parentElement;
    if (right > viewport + SLACK && (!parent || parent.getBoundingClientRect().right <= viewport + SLACK)) {
      culprits.push(`${describe(el)} (right edge at ${Math.round(right)} px)`);
    }
  }
  problems.push(
    `wide: the page is ${width} px wide in a ${viewport} px viewport: ` +
      (culprits.slice(0, 5).join("; ") || "no single element found")
  );
}

// -- runs of text that overlap ----------------------------------------------------------------
const seen = new Set();
for (let i = 0; i < runs.length; i++) {
  for (let j = i + 1; j < runs.length; j++) {
    const a = runs[i], b = runs[j];
    // Text flowing in one box may touch (a link in a sentence); boxes side by side may not.
    const gap = a.line === b.line ? -SLACK : GAP;
    const hit = a.shown.some((p) =>
      b.shown.some(
        (q) =>
          Math.min(p.right, q.right) - Math.max(p.left, q.left) > -gap &&
          Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top) > 2 * SLACK
      )
    );
    if (!hit) continue;
    const key = describe(a.el) + " | " + describe(b.el);
    if (seen.has(key)) continue;
    seen.add(key);
    problems.push(`overlap: ${describe(a.el)} and ${describe(b.el)} (closer than ${GAP} px)`);
  }
}
return problems;
