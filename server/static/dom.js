// The one DOM helper every module uses: an element with a class and text, never HTML.

export const el = (tag, className, text) => {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text != null) node.textContent = text;
  return node;
};

export function button(className, text, onClick, label) {
  const node = el("button", className, text);
  node.type = "button";
  if (label) node.setAttribute("aria-label", label);
  if (onClick) node.addEventListener("click", onClick);
  return node;
}
