// The chat list as a drawer on narrow screens (below 720 px): a menu button opens it over
// the conversation, Esc, the scrim or choosing a chat closes it. On wide screens the list is
// always shown and none of this applies.

const NARROW = matchMedia("(max-width: 720px)");

export class Drawer {
  constructor({ drawer, toggle, scrim, main, focusFirst }) {
    Object.assign(this, { drawer, toggle, scrim, main, focusFirst });
    toggle.addEventListener("click", () => (this.isOpen ? this.close() : this.open()));
    scrim.addEventListener("click", () => this.close());
    drawer.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && this.isOpen) {
        event.preventDefault();
        event.stopPropagation(); // closes the drawer; never stops a run
        this.close();
      }
    });
    NARROW.addEventListener("change", () => this.close(false));
    this.close(false);
  }

  get isOpen() {
    return document.body.classList.contains("drawer-open");
  }

  open() {
    document.body.classList.add("drawer-open");
    this.toggle.setAttribute("aria-expanded", "true");
    this.drawer.inert = false;
    this.main.inert = NARROW.matches;
    this.focusFirst.focus();
  }

  /** Close it; `returnFocus` puts focus back on the menu button. */
  close(returnFocus = true) {
    const wasOpen = this.isOpen;
    document.body.classList.remove("drawer-open");
    this.toggle.setAttribute("aria-expanded", "false");
    this.main.inert = false;
    this.drawer.inert = NARROW.matches; // a closed drawer is out of the tab order
    if (wasOpen && returnFocus && NARROW.matches) this.toggle.focus();
  }
}
