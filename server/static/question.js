// The banner for a question from the agent (request_input). It only shows the question and
// how long is left: the main message box answers it. While it is up, the tab title blinks
// ("❓ Input needed"), also in a background tab, and the page glows gently.

const BASE_TITLE = document.title;

export class QuestionBanner {
  constructor({ banner, question, expiry }) {
    Object.assign(this, { banner, questionNode: question, expiry });
    this.current = null; // {question, tool_call_id, step, expires_at, run_id}
    this.flashTimer = null;
    this.expiryTimer = null;
  }

  show(question) {
    this.current = question;
    this.questionNode.textContent = question.question;
    this.banner.hidden = false;
    document.body.classList.add("awaiting");
    clearInterval(this.flashTimer);
    let on = false;
    const flash = () => {
      on = !on;
      document.title = on ? `❓ Input needed — ${BASE_TITLE}` : BASE_TITLE;
    };
    flash();
    this.flashTimer = setInterval(flash, 1000); // timers keep running, throttled, in background tabs
    clearInterval(this.expiryTimer);
    const showExpiry = () => {
      const left = Math.max(0, Math.round((question.expires_at - Date.now()) / 1000));
      this.expiry.textContent = question.expires_at
        ? `Answer in the message box within ${Math.floor(left / 60)}:${String(left % 60).padStart(2, "0")}`
        : "Answer in the message box.";
    };
    showExpiry();
    this.expiryTimer = setInterval(showExpiry, 1000);
  }

  hide() {
    this.current = null;
    this.banner.hidden = true;
    document.body.classList.remove("awaiting");
    clearInterval(this.flashTimer);
    clearInterval(this.expiryTimer);
    document.title = BASE_TITLE;
  }
}
