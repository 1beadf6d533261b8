// The gateway's browser client: confirms a payment that the merchant's
// server created ("confirm": false), with the merchant's publishable key and
// the payment's client secret, and never charges the customer twice.
//
// The rules it keeps (docs/frontends.md):
//   - one Idempotency-Key per payment attempt, made when the attempt starts
//     and kept, with the exact body, until a final answer: across retries,
//     double clicks and page reloads (sessionStorage);
//   - retries with back-off and jitter, with the same key and body, on a
//     network error, 409 request-in-flight, 429 and 5xx, never sooner than
//     Retry-After; never on 400, 401, 402, 403, 404, 413 or 422;
//   - after giving up, it finds the outcome by polling GET /payments/{id},
//     never by posting again with a new key;
//   - a payment waiting for the customer (3-D Secure) is handed to the page
//     as "requires_action" with what to do.
//
// No runtime dependencies: fetch, crypto and Web Storage are the platform's.

/** @type {Required<import('./gateway').RetryOptions>} */
export const DEFAULT_RETRY = Object.freeze({
  maxAttempts: 8,
  baseDelayMs: 250,
  maxDelayMs: 5000,
  requestTimeoutMs: 30000,
  pollIntervalMs: 1000,
  pollTimeoutMs: 15000,
});

/** Where an attempt is kept, per payment. */
export const STORAGE_PREFIX = 'gateway.attempt.';

/**
 * A refusal the client does not retry (a 4xx other than 409 in-flight and
 * 429), or a broken answer.
 */
export class GatewayError extends Error {
  /**
   * @param {string} message
   * @param {{status?: number, problem?: any, cause?: unknown}} [details]
   */
  constructor(message, details = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = 'GatewayError';
    /** HTTP status; 0 when there was no answer. */
    this.status = details.status ?? 0;
    /** The RFC 9457 problem the gateway answered, when it did. */
    this.problem = details.problem ?? null;
    /** The problem's stable type, e.g. "/problems/confirm-mismatch". */
    this.type = this.problem?.type ?? null;
  }
}

/**
 * The delay before retry number `attempt` (1 for the first retry): "full
 * jitter", a random time up to an exponentially growing cap, so that many
 * clients failing together do not retry together.
 * @param {number} attempt
 * @param {{baseDelayMs: number, maxDelayMs: number}} retry
 * @param {() => number} [random]
 */
export function backoffDelay(attempt, retry, random = Math.random) {
  const cap = Math.min(retry.maxDelayMs, retry.baseDelayMs * 2 ** Math.max(0, attempt - 1));
  return Math.floor(random() * cap);
}

/**
 * Retry-After (delay-seconds or an HTTP date) in milliseconds; null when
 * absent or unreadable.
 * @param {string | null} value
 * @param {number} [now]
 */
export function retryAfterMs(value, now = Date.now()) {
  if (value == null || value.trim() === '') return null;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  if (Number.isNaN(at)) return null;
  return Math.max(0, at - now);
}

/** A UUID v4: crypto.randomUUID where the page is a secure context, else from getRandomValues. */
export function newIdempotencyKey() {
  const c = globalThis.crypto;
  if (typeof c?.randomUUID === 'function') return c.randomUUID();
  const b = c.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** A Storage held in memory, where the platform has no sessionStorage. */
export class MemoryStorage {
  constructor() { this.items = new Map(); }
  getItem(k) { return this.items.has(k) ? this.items.get(k) : null; }
  setItem(k, v) { this.items.set(k, String(v)); }
  removeItem(k) { this.items.delete(k); }
}

/** How many looks at a payment still awaiting its confirmation tell that no confirm reached it. */
const UNCONFIRMED_LOOKS = 3;

const FINAL_PAYMENT = { succeeded: 'succeeded', declined: 'declined', failed: 'declined', canceled: 'declined' };
const RETRIED_PROBLEMS = new Set(['/problems/request-in-flight']);
const LOOK_UP_PROBLEMS = new Set(['/problems/payment-not-confirmable', '/problems/idempotency-key-reused']);

/**
 * The gateway's browser client. One instance serves a page; several pages
 * (or reloads of one) sharing a Storage share attempts.
 */
export class GatewayClient {
  /** @param {import('./gateway').ClientOptions} options */
  constructor(options) {
    if (!options || typeof options.publishableKey !== 'string' || !options.publishableKey.startsWith('pk_')) {
      throw new TypeError('GatewayClient needs a publishableKey (pk_...): never a secret key (sk_...) in a browser');
    }
    this.baseUrl = (options.baseUrl ?? '').replace(/\/+$/, '');
    this.publishableKey = options.publishableKey;
    this.retry = { ...DEFAULT_RETRY, ...(options.retry ?? {}) };
    this.storage = options.storage ?? globalThis.sessionStorage ?? new MemoryStorage();
    this.fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.random = options.random ?? Math.random;
    this.sleep = options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    this.onEvent = options.onEvent ?? (() => {});
    /** @type {Map<string, Promise<any>>} */
    this.running = new Map();
  }

  /**
   * The attempt stored for a payment (its key and exact body), or null.
   * @param {string} paymentId
   */
  pendingAttempt(paymentId) {
    const raw = this.storage.getItem(STORAGE_PREFIX + paymentId);
    if (!raw) return null;
    try {
      const a = JSON.parse(raw);
      return typeof a?.key === 'string' && typeof a?.body === 'string' ? a : null;
    } catch {
      return null;
    }
  }

  /**
   * Drops a payment's stored attempt; a later confirm starts a new one.
   * Only for a payment the page gives up on (a new payment for a new try).
   * @param {string} paymentId
   */
  forgetAttempt(paymentId) {
    this.storage.removeItem(STORAGE_PREFIX + paymentId);
  }

  /**
   * Confirms the payment. While an attempt of this payment is stored (an
   * earlier call without a final answer, before a reload too), that attempt
   * is resumed with its own key and body, whatever is passed now: one
   * attempt, one key, until its final answer. Calls made while one runs get
   * its result.
   * @param {import('./gateway').ConfirmParams} params
   * @returns {Promise<import('./gateway').Outcome>}
   */
  confirmPayment(params) {
    const { paymentId, clientSecret } = params;
    checkIds(paymentId, clientSecret);
    let attempt = this.pendingAttempt(paymentId);
    if (!attempt) {
      const body = { payment_method: params.paymentMethod };
      if (params.amount !== undefined) body.amount = params.amount;
      if (params.orderId !== undefined) body.order_id = params.orderId;
      attempt = { key: newIdempotencyKey(), body: JSON.stringify(body), started: Date.now() };
      this.storage.setItem(STORAGE_PREFIX + paymentId, JSON.stringify(attempt));
      this.onEvent({ type: 'attempt', paymentId, key: attempt.key });
    } else {
      this.onEvent({ type: 'resume', paymentId, key: attempt.key });
    }
    return this.once(paymentId, () => this.run(paymentId, clientSecret, attempt));
  }

  /**
   * Resumes the payment's stored attempt, as after a page reload; null when
   * none is stored.
   * @param {{paymentId: string, clientSecret: string}} params
   * @returns {Promise<import('./gateway').Outcome | null>}
   */
  async resumePayment({ paymentId, clientSecret }) {
    checkIds(paymentId, clientSecret);
    const attempt = this.pendingAttempt(paymentId);
    if (!attempt) return null;
    this.onEvent({ type: 'resume', paymentId, key: attempt.key });
    return this.once(paymentId, () => this.run(paymentId, clientSecret, attempt));
  }

  /**
   * Reads the payment as it stands now.
   * @param {{paymentId: string, clientSecret: string}} params
   */
  async retrievePayment({ paymentId, clientSecret }) {
    checkIds(paymentId, clientSecret);
    const res = await this.send('GET', paymentId, clientSecret, null, null);
    const body = await readJSON(res);
    if (res.status !== 200) throw refusal(res.status, body);
    return body;
  }

  /**
   * Polls GET /payments/{id} until the payment is settled or waits for the
   * customer, for at most pollTimeoutMs; "processing" when it is still
   * being worked on then, "unknown" when the gateway could not be asked or
   * the confirm never reached it (the attempt stays stored: try again).
   * @param {{paymentId: string, clientSecret: string}} params
   * @returns {Promise<import('./gateway').Outcome>}
   */
  async waitForOutcome({ paymentId, clientSecret }) {
    checkIds(paymentId, clientSecret);
    const deadline = Date.now() + this.retry.pollTimeoutMs;
    const key = this.pendingAttempt(paymentId)?.key ?? null;
    let last = null;
    let unconfirmed = 0;
    for (;;) {
      try {
        last = await this.retrievePayment({ paymentId, clientSecret });
        this.onEvent({ type: 'poll', paymentId, status: last.status });
        const out = outcomeOfPayment(last, key, false);
        if (out.status !== 'processing' && out.status !== 'unknown') return this.settle(paymentId, out);
        // Still awaiting its confirmation: no confirm reached the gateway
        // (a late one would have taken it by now). Nothing was charged.
        if (last.status === 'requires_confirmation' && ++unconfirmed >= UNCONFIRMED_LOOKS) break;
      } catch (err) {
        if (err instanceof GatewayError && err.status >= 400 && err.status < 500 && err.status !== 429) throw err;
        this.onEvent({ type: 'poll', paymentId, error: String(err) });
      }
      if (Date.now() + this.retry.pollIntervalMs > deadline) break;
      await this.sleep(this.retry.pollIntervalMs);
    }
    if (last && (last.status === 'processing' || last.status === 'requires_review')) {
      return outcomeOfPayment(last, key, false);
    }
    return { status: 'unknown', payment: last, nextAction: null, declineCode: null, key, replayed: false };
  }

  once(paymentId, fn) {
    const running = this.running.get(paymentId);
    if (running) return running;
    const p = fn().finally(() => this.running.delete(paymentId));
    this.running.set(paymentId, p);
    return p;
  }

  /** Runs an attempt: posts, retries with the same key and body, then polls. */
  async run(paymentId, clientSecret, attempt) {
    const r = this.retry;
    for (let n = 1; ; n++) {
      let res = null;
      let reason;
      this.onEvent({ type: 'request', paymentId, key: attempt.key, attempt: n });
      try {
        res = await this.send('POST', paymentId, clientSecret, attempt.key, attempt.body);
      } catch (err) {
        reason = `network: ${err?.message ?? err}`;
      }
      let wait = null;
      if (res) {
        const body = await readJSON(res).catch(() => null);
        switch (res.status) {
          case 201:
          case 202:
          case 402: {
            if (!body || typeof body.status !== 'string') {
              reason = `an unreadable ${res.status} answer`;
              break;
            }
            const out = outcomeOfPayment(body, attempt.key, res.headers.get('Idempotent-Replayed') === 'true');
            return this.settle(paymentId, out);
          }
          case 409:
            if (LOOK_UP_PROBLEMS.has(body?.type)) {
              // Another attempt (another key) took the payment, or this key's
              // answer expired: the payment's state is the answer.
              this.onEvent({ type: 'look_up', paymentId, problem: body.type });
              return this.lookUp(paymentId, clientSecret);
            }
            if (!RETRIED_PROBLEMS.has(body?.type)) {
              this.forgetAttempt(paymentId);
              throw refusal(res.status, body);
            }
            reason = '409 in flight';
            wait = retryAfterMs(res.headers.get('Retry-After'));
            break;
          case 429:
            reason = '429';
            wait = retryAfterMs(res.headers.get('Retry-After'));
            break;
          default:
            if (res.status >= 500) {
              reason = `${res.status}`;
              wait = retryAfterMs(res.headers.get('Retry-After'));
              break;
            }
            // 400, 401, 403, 404, 413, 422: this request can never succeed.
            this.forgetAttempt(paymentId);
            throw refusal(res.status, body);
        }
      }
      if (n >= r.maxAttempts) {
        this.onEvent({ type: 'gave_up', paymentId, key: attempt.key, attempts: n, reason });
        return this.waitForOutcome({ paymentId, clientSecret });
      }
      const delay = Math.max(wait ?? 0, backoffDelay(n, r, this.random));
      this.onEvent({ type: 'retry', paymentId, key: attempt.key, attempt: n, delayMs: delay, retryAfterMs: wait, reason });
      await this.sleep(delay);
    }
  }

  /** The outcome of a payment another request settled or took. */
  async lookUp(paymentId, clientSecret) {
    const p = await this.retrievePayment({ paymentId, clientSecret });
    if (p.status === 'requires_confirmation') {
      this.forgetAttempt(paymentId);
      throw new GatewayError(`payment ${paymentId} can no longer be confirmed (it expired): start a new payment`, { status: 409 });
    }
    return this.settle(paymentId, outcomeOfPayment(p, this.pendingAttempt(paymentId)?.key ?? null, false));
  }

  /** Drops the attempt once its answer is final. */
  settle(paymentId, out) {
    if (out.status === 'succeeded' || out.status === 'declined') this.forgetAttempt(paymentId);
    this.onEvent({ type: 'outcome', paymentId, status: out.status, key: out.key });
    return out;
  }

  /** One HTTP exchange, bounded by requestTimeoutMs. */
  async send(method, paymentId, clientSecret, key, body) {
    const headers = {
      Authorization: `Bearer ${this.publishableKey}`,
      'Client-Secret': clientSecret,
    };
    if (key) headers['Idempotency-Key'] = key;
    if (body != null) headers['Content-Type'] = 'application/json';
    const path = `/payments/${encodeURIComponent(paymentId)}${method === 'POST' ? '/confirm' : ''}`;
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(new Error('request timed out')), this.retry.requestTimeoutMs);
    try {
      return await this.fetch(this.baseUrl + path, { method, headers, body: body ?? undefined, signal: ctl.signal, cache: 'no-store' });
    } finally {
      clearTimeout(timer);
    }
  }
}

/**
 * The outcome a page shows for a payment as the gateway rendered it (a
 * page that reads the payment on load shows it so).
 * @param {import('./gateway').Payment} p
 * @param {string | null} [key]
 * @param {boolean} [replayed]
 * @returns {import('./gateway').Outcome}
 */
export function outcomeOfPayment(p, key = null, replayed = false) {
  let status = FINAL_PAYMENT[p.status];
  if (!status) {
    status = { requires_action: 'requires_action', processing: 'processing', requires_review: 'processing' }[p.status] ?? 'unknown';
  }
  return {
    status,
    payment: p,
    nextAction: p.next_action ?? null,
    declineCode: status === 'declined' ? (p.decline_code ?? p.status) : null,
    key,
    replayed,
  };
}

function refusal(status, problem) {
  const detail = problem?.detail ?? problem?.title ?? `the gateway answered ${status}`;
  return new GatewayError(detail, { status, problem });
}

async function readJSON(res) {
  const text = await res.text();
  if (text === '') return null;
  return JSON.parse(text);
}

function checkIds(paymentId, clientSecret) {
  if (typeof paymentId !== 'string' || !paymentId.startsWith('pay_')) throw new TypeError('paymentId must be the payment\'s id (pay_...)');
  if (typeof clientSecret !== 'string' || !clientSecret.startsWith(`${paymentId}_secret_`)) {
    throw new TypeError('clientSecret must be the client_secret of that payment, as its creation answered it');
  }
}
