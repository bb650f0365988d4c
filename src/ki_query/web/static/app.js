// The page works without this file; it only adds a key: "/" jumps to the search box.
document.addEventListener("keydown", (event) => {
  const target = event.target;
  const typing = target instanceof HTMLInputElement || target instanceof HTMLTextAreaElement || target instanceof HTMLSelectElement;
  if (event.key === "/" && !typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
    const box = document.getElementById("q");
    if (box) {
      event.preventDefault();
      box.focus();
      box.select();
    }
  }
});
