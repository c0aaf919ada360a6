// MathJax 3 settings, read by assets/mathjax/tex-svg.js (copied into the site by the figures hook,
// so no CDN is involved). pymdownx.arithmatex (generic mode) wraps math in \( \) and \[ \] inside
// elements of class "arithmatex"; MathJax typesets those elements and nothing else.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex"
  },
  svg: { fontCache: "global" }
};

// MathJax typesets the page once when it loads. The site does not use Material's instant
// navigation (navigation.instant); if it ever does, pages swapped in without a reload need
// `document$.subscribe(() => { MathJax.typesetClear(); MathJax.texReset(); MathJax.typesetPromise(); })`.
