import { connect, createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

/**
 * A TCP proxy on 127.0.0.1 in front of a real server (the database, the model stub), whose link the
 * test can cut: at once (`cut()`), or at the first byte the client sends after `cutOnNextSend()` — so
 * that a request is cut while its query is in flight — and restore (`restore()`). While cut, new
 * connections are refused (closed at once), as when the server is down. `freeze()` silences the open
 * connections without closing them.
 */
export class CuttableProxy {
  private server: Server | null = null;
  private readonly pairs = new Set<[Socket, Socket]>();
  private readonly frozen = new Set<[Socket, Socket]>();
  private down = false;
  private armed = false;
  /** Connections cut so far. */
  cuts = 0;
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  async start(): Promise<void> {
    this.server = createServer((client) => {
      if (this.down) {
        client.destroy();
        return;
      }
      const upstream = connect(this.targetPort, this.targetHost);
      const pair: [Socket, Socket] = [client, upstream];
      this.pairs.add(pair);
      const drop = () => {
        this.pairs.delete(pair);
        this.frozen.delete(pair);
        client.destroy();
        upstream.destroy();
      };
      client.on('data', (d) => {
        if (this.frozen.has(pair)) return;
        if (this.armed) {
          this.armed = false;
          this.cut();
          return;
        }
        upstream.write(d);
      });
      upstream.on('data', (d) => {
        if (!this.frozen.has(pair)) client.write(d);
      });
      client.on('close', drop);
      upstream.on('close', drop);
      client.on('error', drop);
      upstream.on('error', drop);
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', () => resolve()));
    this.port = (this.server.address() as AddressInfo).port;
  }

  /** Cuts every connection now and refuses new ones until restore(). */
  cut(): void {
    this.down = true;
    for (const [client, upstream] of this.pairs) {
      this.cuts++;
      client.destroy();
      upstream.destroy();
    }
    this.pairs.clear();
  }

  /**
   * The connections open now stop carrying bytes either way, without being closed (a half-open link:
   * neither end hears of it); connections made later work.
   */
  freeze(): void {
    for (const pair of this.pairs) this.frozen.add(pair);
  }

  /** The next bytes any client sends are not delivered: every connection is cut at that moment. */
  cutOnNextSend(): void {
    this.armed = true;
  }

  restore(): void {
    this.down = false;
    this.armed = false;
  }

  async stop(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}
