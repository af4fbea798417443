// gemkit view: small conveniences; every page works without this script.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // a filter that changes applies at once
  for (const el of document.querySelectorAll("[data-autosubmit]")) {
    el.addEventListener("change", () => el.form && el.form.requestSubmit());
  }
  // keys: "/" search, j/k or arrows next/previous record
  document.addEventListener("keydown", (ev) => {
    const typing = ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName);
    if (typing || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (ev.key === "/") {
      const box = document.querySelector("input[name=q]");
      if (box) { ev.preventDefault(); box.focus(); }
      return;
    }
    const rel = { j: "next", ArrowRight: "next", k: "prev", ArrowLeft: "prev" }[ev.key];
    const link = rel && document.querySelector(`.recnav a[data-key=${rel}]`);
    if (link) { window.location.href = link.href; }
  });
});
