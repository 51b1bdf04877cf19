// Matrices as tables, coloured as heatmaps, for any widget that shows one (attention weights, scores, a
// positional-encoding table, one heatmap per head). Each table is a grid with one Tab stop (roving tabindex):
// the arrow keys, Home/End and Ctrl+Home/End move between its cells, and every cell's full value shows on
// keyboard focus as on hover (its title, and the readout line of base.js).

import { formatNumber, h, viridis } from "./base.js";

export const MATRIX_CSS = `
  .grid { display: flex; flex-wrap: wrap; gap: 16px 22px; align-items: flex-start; }
  .step td { min-width: 4.2em; border: 1px solid #fff; }
  .step td:focus-visible { outline-offset: -3px; }
  td.masked { background: repeating-linear-gradient(45deg, #eee, #eee 4px, #ddd 4px, #ddd 8px); color: #555; }
  .corner { color: var(--muted); font-weight: 400; }
  .legend { display: flex; align-items: center; gap: 6px; margin-top: 10px; font-size: 12px;
            color: var(--muted); }
  .ramp { width: 160px; height: 10px; border-radius: 3px;
          background: linear-gradient(90deg, #440154, #3b528b, #21918c, #5ec962, #fde725); }
`;

/** The key to a weights heatmap coloured with `colour: "unit"`: viridis from weight 0 to 1 (decorative). */
export function weightLegend() {
  return h(
    "div",
    { class: "legend", "aria-hidden": "true" },
    h("span", { text: "weight 0" }),
    h("span", { class: "ramp" }),
    h("span", { text: "1" }),
  );
}

/**
 * A matrix (rows of numbers; null is −∞, i.e. hidden) as a captioned table whose cells the keyboard reaches.
 * `colour`: "range" (viridis from the smallest to the largest value), "unit" (from 0 to 1) or "none".
 * Each cell's title is "row → column: value", with the value in full.
 */
export function matrixTable({ name, caption, values, rows, cols, colour = "range", corner = "" }) {
  const finite = values.flat().filter((v) => v !== null);
  const [lo, hi] = colour === "unit" ? [0, 1] : [Math.min(...finite), Math.max(...finite)];
  const cell = (value, i, j) => {
    const td = h("td", {
      text: formatNumber(value),
      title: `${rows[i]} → ${cols[j]}: ${value === null ? "−∞ (hidden)" : value}`,
      tabindex: i === 0 && j === 0 ? 0 : -1,
      "data-row": i,
      "data-col": j,
    });
    if (value === null) {
      td.className = "masked";
    } else if (colour !== "none") {
      const shade = viridis(hi > lo ? (value - lo) / (hi - lo) : colour === "unit" ? value : 0.5);
      td.style.background = shade.background;
      td.style.color = shade.text;
    }
    return td;
  };
  const table = h(
    "table",
    { "data-matrix": name, role: "grid", onkeydown: moveWithKeys },
    h("caption", { text: caption }),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        h("th", { scope: "col", class: "corner", text: corner }),
        ...cols.map((c) => h("th", { scope: "col", text: c })),
      ),
    ),
    h(
      "tbody",
      {},
      ...values.map((row, i) =>
        h("tr", {}, h("th", { scope: "row", text: rows[i] }), ...row.map((value, j) => cell(value, i, j))),
      ),
    ),
  );
  return h("div", { class: `step scroll step-${name}` }, table);
}

/** The matrix cell an event happened on, if any: { matrix, cell }. */
export function cellOf(element) {
  const cell = element.closest?.("td[data-row]");
  return cell ? { matrix: cell.closest("table").dataset.matrix, cell } : null;
}

/** Arrow keys move one cell, Home/End to the row's ends, Ctrl+Home/End to the table's corners. */
function moveWithKeys(event) {
  const cell = event.target.closest("td[data-row]");
  if (!cell) return;
  const table = event.currentTarget;
  const i = Number(cell.dataset.row);
  const j = Number(cell.dataset.col);
  const last = table.querySelector("tbody tr:last-child td:last-child");
  const [lastRow, lastCol] = [Number(last.dataset.row), Number(last.dataset.col)];
  const moves = {
    ArrowRight: [i, j + 1],
    ArrowLeft: [i, j - 1],
    ArrowDown: [i + 1, j],
    ArrowUp: [i - 1, j],
    Home: event.ctrlKey ? [0, 0] : [i, 0],
    End: event.ctrlKey ? [lastRow, lastCol] : [i, lastCol],
  };
  const target = moves[event.key];
  if (!target) return;
  event.preventDefault();
  const row = Math.min(lastRow, Math.max(0, target[0]));
  const col = Math.min(lastCol, Math.max(0, target[1]));
  focusCell(table, row, col);
}

/** Moves the table's one Tab stop to cell (i, j) and focuses it. */
function focusCell(table, i, j) {
  const cell = table.querySelector(`td[data-row="${i}"][data-col="${j}"]`);
  if (!cell) return;
  for (const other of table.querySelectorAll("td[tabindex='0']")) other.tabIndex = -1;
  cell.tabIndex = 0;
  cell.focus();
}

/**
 * Keeps keyboard focus on the same cell across a redraw: call before replacing the tables, and call what it
 * returns after (nothing happens when no cell had focus, or the new tables have no such cell).
 */
export function keepCellFocus(root) {
  const active = root.activeElement;
  const focused = active && cellOf(active);
  if (!focused) return () => {};
  const { row, col } = focused.cell.dataset;
  return () => {
    const table = root.querySelector(`table[data-matrix="${focused.matrix}"]`);
    if (table) focusCell(table, row, col);
  };
}
