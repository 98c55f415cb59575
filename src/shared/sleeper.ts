/**
 * A sleep another part of the program can cut short (a background loop waiting for work or for its
 * next poll). A wake that arrives while nobody sleeps (the loop is busy) is kept: the next sleep returns
 * at once, so a stop or a new-work signal is never lost between two checks.
 */
export class Sleeper {
  private wakeUp: (() => void) | null = null;
  private woken = false;

  sleep(ms: number): Promise<void> {
    if (this.woken) {
      this.woken = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.wakeUp = null;
        resolve();
      }, ms);
      timer.unref();
      this.wakeUp = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  wake(): void {
    const w = this.wakeUp;
    this.wakeUp = null;
    if (w) w();
    else this.woken = true;
  }
}
