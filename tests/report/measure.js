// What a reader of report.html sees of its tables, measured in the page Chromium laid
// out (tests/report/chromium.py `measure` appends this script to a copy of the page):
// each numeric cell's white-space and the lines its text takes, each table's width
// against its box and whether that box scrolls, and whether the page itself is wider
// than the window.
(() => {
  const lines = (el) => {
    const range = document.createRange();
    range.selectNodeContents(el);
    return new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
  };
  // the h3 before the table, or before the box it sits in
  const titleOf = (table) => {
    const box = table.parentElement.classList.contains("table") ? table.parentElement : table;
    return box.previousElementSibling?.textContent ?? "";
  };
  const cells = [...document.querySelectorAll("td.num, th.num")].map((cell) => ({
    table: titleOf(cell.closest("table")),
    text: cell.textContent,
    head: cell.tagName === "TH",
    whiteSpace: getComputedStyle(cell).whiteSpace,
    lines: lines(cell),
  }));
  const tables = [...document.querySelectorAll("table")].map((t) => ({
    title: titleOf(t),
    width: t.getBoundingClientRect().width,
    room: t.parentElement.getBoundingClientRect().width,
    scrolls: getComputedStyle(t.parentElement).overflowX === "auto",
  }));
  const page = document.scrollingElement;
  const pre = document.createElement("pre");
  pre.id = "nvwatch-measure";
  pre.textContent = JSON.stringify({
    cells,
    tables,
    pageOverflows: page.scrollWidth > page.clientWidth,
  });
  document.body.appendChild(pre);
})();
