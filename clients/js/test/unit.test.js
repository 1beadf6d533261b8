// The client's rules on a scripted network: what it retries, how long it
// waits, what it never retries. (gateway.test.js proves the same against a
// real gateway.)
import { test } from 'node:test';
import assert from 'node:assert/strict';

import {
  GatewayClient, GatewayError, MemoryStorage, backoffDelay, retryAfterMs, newIdempotencyKey, DEFAULT_RETRY,
} from '../gateway.js';

const PAY = 'pay_01KB4ZQ4C9V8X2M3N5P7R9T1W3';
const SECRET = `${PAY}_secret_abcdefghijklmnopqrstuvwxyz234567`;

const payment = (status, extra = {}) => ({
  id: PAY, status, amount: 1000, currency: 'KRW', payment_method: 'pm_card_ok', merchant_order_id: 'ord_1',
  psp_reference: null, decline_code: null, ...extra,
});

// scripted is a fetch answering from a list: a Response-like object, or an
// Error to throw (a network failure). It records every call.
function scripted(answers) {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url, method: init.method, headers: init.headers, body: init.body });
    const next = answers.length > 1 ? answers.shift() : answers[0];
    if (next instanceof Error) throw next;
    return new Response(next.body === undefined ? '' : JSON.stringify(next.body), {
      status: next.status, headers: { 'Content-Type': 'application/json', ...(next.headers ?? {}) },
    });
  };
  return { fetch, calls };
}

function client(fetch, extra = {}) {
  const slept = [];
  const c = new GatewayClient({
    publishableKey: 'pk_test', baseUrl: 'https://gw.example', fetch, storage: new MemoryStorage(),
    sleep: async (ms) => { slept.push(ms); }, random: () => 0.5, ...extra,
  });
  return { c, slept };
}

test('backoff: full jitter under a cap that doubles up to maxDelayMs', () => {
  const r = { baseDelayMs: 100, maxDelayMs: 1000 };
  assert.equal(backoffDelay(1, r, () => 0.999), 99);
  assert.equal(backoffDelay(2, r, () => 0.999), 199);
  assert.equal(backoffDelay(4, r, () => 0.999), 799);
  assert.equal(backoffDelay(10, r, () => 0.999), 999);
  assert.equal(backoffDelay(3, r, () => 0), 0);
  for (let n = 1; n < 20; n++) {
    const d = backoffDelay(n, r);
    assert.ok(d >= 0 && d < 1000, `delay ${d}`);
  }
});

test('Retry-After: seconds or an HTTP date', () => {
  assert.equal(retryAfterMs('3'), 3000);
  assert.equal(retryAfterMs(' 0 '), 0);
  assert.equal(retryAfterMs(new Date(10_000).toUTCString(), 5_000), 5_000);
  assert.equal(retryAfterMs(null), null);
  assert.equal(retryAfterMs('soon'), null);
});

test('one key per attempt: a UUID, also where randomUUID is missing', () => {
  const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
  assert.match(newIdempotencyKey(), uuid);
  const saved = globalThis.crypto.randomUUID;
  Object.defineProperty(globalThis.crypto, 'randomUUID', { value: undefined, configurable: true });
  try {
    const a = newIdempotencyKey();
    assert.match(a, uuid);
    assert.notEqual(a, newIdempotencyKey());
  } finally {
    Object.defineProperty(globalThis.crypto, 'randomUUID', { value: saved, configurable: true });
  }
});

test('a secret key is refused', () => {
  assert.throws(() => new GatewayClient({ publishableKey: 'sk_live' }), TypeError);
});

for (const status of [400, 401, 403, 404, 413, 422]) {
  test(`never retries ${status}`, async () => {
    const { fetch, calls } = scripted([{ status, body: { type: '/problems/x', title: 't', status, detail: 'no' } }]);
    const { c } = client(fetch);
    await assert.rejects(c.confirmPayment({ paymentId: PAY, clientSecret: SECRET, paymentMethod: 'pm_card_ok' }),
      (err) => err instanceof GatewayError && err.status === status && err.type === '/problems/x');
    assert.equal(calls.length, 1);
    assert.equal(c.pendingAttempt(PAY), null, 'a refused attempt is dropped');
  });
}

test('never retries 402: a decline is an answer', async () => {
  const { fetch, calls } = scripted([{ status: 402, body: payment('declined', { decline_code: 'card_declined' }) }]);
  const { c } = client(fetch);
  const out = await c.confirmPayment({ paymentId: PAY, clientSecret: SECRET, paymentMethod: 'pm_card_declined' });
  assert.equal(out.status, 'declined');
  assert.equal(out.declineCode, 'card_declined');
  assert.equal(calls.length, 1);
  assert.equal(c.pendingAttempt(PAY), null);
});

test('retries a network error, 409 in flight, 429 and 5xx with the same key and body', async () => {
  const problem = (status, type) => ({ status, headers: { 'Retry-After': '2' }, body: { type, title: 't', status } });
  const { fetch, calls } = scripted([
    new TypeError('fetch failed'),
    problem(409, '/problems/request-in-flight'),
    problem(429, '/problems/rate-limited'),
    problem(500, '/problems/internal'),
    problem(502, '/problems/psp-outcome-unknown'),
    problem(503, '/problems/service-unavailable'),
    { status: 504 },
    { status: 201, body: payment('succeeded') },
  ]);
  const { c, slept } = client(fetch, { random: () => 0.1 });
  const out = await c.confirmPayment({ paymentId: PAY, clientSecret: SECRET, paymentMethod: 'pm_card_ok' });
  assert.equal(out.status, 'succeeded');
  assert.equal(calls.length, 8);
  assert.equal(new Set(calls.map((x) => x.headers['Idempotency-Key'])).size, 1, 'one key for the attempt');
  assert.equal(new Set(calls.map((x) => x.body)).size, 1, 'one body for the attempt');
  assert.equal(calls[0].url, `https://gw.example/payments/${PAY}/confirm`);
  assert.equal(calls[0].headers.Authorization, 'Bearer pk_test');
  assert.equal(calls[0].headers['Client-Secret'], SECRET);
  // Never sooner than Retry-After (2 s) where it was sent; jittered back-off otherwise.
  assert.deepEqual(slept.slice(1, 6), [2000, 2000, 2000, 2000, 2000]);
  assert.ok(slept[0] < DEFAULT_RETRY.baseDelayMs && slept[6] < DEFAULT_RETRY.maxDelayMs);
  assert.equal(c.pendingAttempt(PAY), null, 'a final answer drops the attempt');
});

test('after giving up, polls GET instead of posting again', async () => {
  const { fetch, calls } = scripted([
    new TypeError('fetch failed'), new TypeError('fetch failed'), new TypeError('fetch failed'),
    { status: 200, body: payment('processing') },
    { status: 200, body: payment('succeeded') },
  ]);
  const { c } = client(fetch, { retry: { maxAttempts: 3, pollIntervalMs: 1, pollTimeoutMs: 60_000 } });
  const out = await c.confirmPayment({ paymentId: PAY, clientSecret: SECRET, paymentMethod: 'pm_card_ok' });
  assert.equal(out.status, 'succeeded');
  assert.deepEqual(calls.map((x) => x.method), ['POST', 'POST', 'POST', 'GET', 'GET']);
  assert.equal(calls[3].url, `https://gw.example/payments/${PAY}`);
});

test('gives up as unknown when the payment still awaits its confirmation: the attempt stays for "try again"', async () => {
  const { fetch, calls } = scripted([
    new TypeError('fetch failed'), new TypeError('fetch failed'),
    { status: 200, body: payment('requires_confirmation') },
  ]);
  const { c } = client(fetch, { retry: { maxAttempts: 2, pollIntervalMs: 1, pollTimeoutMs: 60_000 } });
  const out = await c.confirmPayment({ paymentId: PAY, clientSecret: SECRET, paymentMethod: 'pm_card_ok' });
  assert.equal(out.status, 'unknown');
  assert.equal(calls.filter((x) => x.method === 'GET').length, 3);
  const kept = c.pendingAttempt(PAY);
  assert.ok(kept, 'the attempt is kept');
  assert.equal(kept.key, calls[0].headers['Idempotency-Key']);
});

test('requires_action is handed to the page, and the attempt kept', async () => {
  const na = { type: 'redirect', url: 'https://psp.example/3ds/1' };
  const { fetch } = scripted([{ status: 202, body: payment('requires_action', { next_action: na }) }]);
  const { c } = client(fetch);
  const out = await c.confirmPayment({ paymentId: PAY, clientSecret: SECRET, paymentMethod: 'pm_card_3ds' });
  assert.equal(out.status, 'requires_action');
  assert.deepEqual(out.nextAction, na);
  assert.ok(c.pendingAttempt(PAY));
});

test('payment-not-confirmable: looks the payment up instead of confirming again', async () => {
  const { fetch, calls } = scripted([
    { status: 409, body: { type: '/problems/payment-not-confirmable', title: 't', status: 409, payment_id: PAY } },
    { status: 200, body: payment('succeeded') },
  ]);
  const { c } = client(fetch);
  const out = await c.confirmPayment({ paymentId: PAY, clientSecret: SECRET, paymentMethod: 'pm_card_ok' });
  assert.equal(out.status, 'succeeded');
  assert.deepEqual(calls.map((x) => x.method), ['POST', 'GET']);
});

test('a double click is one attempt, and a later confirm resumes the stored one', async () => {
  let release;
  const gate = new Promise((r) => { release = r; });
  const calls = [];
  const fetch = async (url, init) => {
    calls.push(init);
    await gate;
    return new Response(JSON.stringify(payment('succeeded')), { status: 201 });
  };
  const storage = new MemoryStorage();
  const { c } = client(fetch, { storage });
  const first = c.confirmPayment({ paymentId: PAY, clientSecret: SECRET, paymentMethod: 'pm_card_ok' });
  const second = c.confirmPayment({ paymentId: PAY, clientSecret: SECRET, paymentMethod: 'pm_card_ok' });
  assert.equal(first, second, 'the second click gets the first attempt');
  // The page reloads meanwhile: the new page's client resumes the same attempt.
  const { c: reloaded } = client(fetch, { storage });
  const resumed = reloaded.confirmPayment({ paymentId: PAY, clientSecret: SECRET, paymentMethod: 'pm_card_declined' });
  release();
  await Promise.all([first, resumed]);
  assert.equal(calls.length, 2);
  assert.equal(calls[0].headers['Idempotency-Key'], calls[1].headers['Idempotency-Key']);
  assert.equal(calls[0].body, calls[1].body, 'the stored body, not the new one');
});

test('the ids are checked before anything is sent', () => {
  const { c } = client(async () => { throw new Error('sent'); });
  assert.throws(() => c.confirmPayment({ paymentId: 'x', clientSecret: SECRET }), TypeError);
  assert.throws(() => c.confirmPayment({ paymentId: PAY, clientSecret: 'pay_other_secret_x' }), TypeError);
});
