// The client against a real gateway (started by `go test ./clients/js`,
// which sets the variables below): the API over a real database and the
// fake PSP, behind a proxy that can fail like a network. Each test counts
// the PSP's charges and reads what the proxy saw: one key and one body per
// attempt, however it was retried.
import { test, describe, before } from 'node:test';
import assert from 'node:assert/strict';

import { GatewayClient, GatewayError, MemoryStorage } from '../gateway.js';

const URL_ = process.env.GATEWAY_TEST_URL;
const CONTROL = process.env.GATEWAY_TEST_CONTROL;
const SECRET_KEY = process.env.GATEWAY_TEST_SECRET_KEY;
const PK = process.env.GATEWAY_TEST_PUBLISHABLE_KEY;
const skip = URL_ && CONTROL && SECRET_KEY && PK ? false
  : 'no gateway: run `go test ./clients/js`, which starts one and sets GATEWAY_TEST_URL, GATEWAY_TEST_CONTROL, GATEWAY_TEST_SECRET_KEY and GATEWAY_TEST_PUBLISHABLE_KEY';

const FAST = { baseDelayMs: 20, maxDelayMs: 200, pollIntervalMs: 50, pollTimeoutMs: 3000 };

async function control(method, path, body) {
  const res = await fetch(CONTROL + path, {
    method, headers: { 'Content-Type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  });
  assert.equal(res.status, 200, `${method} ${path}: ${res.status}`);
  return res.json();
}

// The merchant's server: creates a payment to confirm in the browser.
let orders = 0;
async function createPayment(amount = 15000) {
  const res = await fetch(`${URL_}/payments`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${SECRET_KEY}`, 'Content-Type': 'application/json', 'Idempotency-Key': `order-${process.pid}-${++orders}-${Date.now()}` },
    body: JSON.stringify({ amount, currency: 'KRW', confirm: false, description: 'node test order' }),
  });
  assert.equal(res.status, 202);
  const p = await res.json();
  assert.match(p.client_secret, /^pay_[0-9A-Z]{26}_secret_[a-z2-7]{32}$/);
  return { paymentId: p.id, clientSecret: p.client_secret };
}

function newClient(extra = {}) {
  const events = [];
  const c = new GatewayClient({
    baseUrl: URL_, publishableKey: PK, storage: new MemoryStorage(), retry: FAST,
    onEvent: (e) => events.push({ ...e, at: Date.now() }), ...extra,
  });
  return { c, events };
}

const confirms = (seen) => seen.filter((s) => s.method === 'POST' && s.path.endsWith('/confirm'));

// oneAttempt checks what the proxy saw and the database holds: every
// confirm carried the one key and the one body, and the PSP charged once.
async function oneAttempt(p, { requests, charges = 1, status }) {
  const seen = await control('GET', `/seen?payment=${p.paymentId}`);
  const posts = confirms(seen);
  if (requests !== undefined) assert.equal(posts.length, requests, `confirm requests: ${JSON.stringify(posts)}`);
  assert.equal(new Set(posts.map((s) => s.key)).size, 1, 'one Idempotency-Key for the attempt');
  assert.equal(new Set(posts.map((s) => s.body)).size, 1, 'one body for the attempt');
  const state = await control('GET', `/state?payment=${p.paymentId}`);
  assert.equal(state.charges, charges, 'charges at the PSP');
  assert.deepEqual(state.confirm_keys, [posts[0].key], 'the database holds the attempt\'s key, and no other');
  if (status) assert.equal(state.status, status);
  return { seen, posts, state };
}

describe('against a real gateway', { skip }, () => {
  before(async () => { await control('DELETE', '/faults'); });

  test('confirms once, with a UUID key, and forgets the attempt', async () => {
    const p = await createPayment();
    const { c } = newClient();
    const out = await c.confirmPayment({ ...p, paymentMethod: 'pm_card_ok' });
    assert.equal(out.status, 'succeeded');
    assert.equal(out.payment.id, p.paymentId);
    assert.match(out.key, /^[0-9a-f-]{36}$/);
    assert.equal(c.pendingAttempt(p.paymentId), null);
    await oneAttempt(p, { requests: 1, status: 'succeeded' });
  });

  test('an answer lost after the gateway charged: retried with the same key, replayed, one charge', async () => {
    const p = await createPayment();
    await control('POST', '/faults', { path: '/confirm', faults: [{ kind: 'drop_after' }] });
    const { c } = newClient();
    const out = await c.confirmPayment({ ...p, paymentMethod: 'pm_card_ok' });
    assert.equal(out.status, 'succeeded');
    assert.equal(out.replayed, true, 'the retry got the stored answer');
    const { posts } = await oneAttempt(p, { requests: 2, status: 'succeeded' });
    assert.deepEqual(posts.map((s) => s.fault || s.status), ['drop_after', 201]);
  });

  test('502 after the PSP charged: retried after Retry-After with the same key, one charge', async () => {
    const p = await createPayment();
    await control('POST', '/psp/fail', { n: 1 });
    const { c, events } = newClient();
    const out = await c.confirmPayment({ ...p, paymentMethod: 'pm_card_ok' });
    assert.equal(out.status, 'succeeded');
    const { posts } = await oneAttempt(p, { requests: 2, status: 'succeeded' });
    assert.deepEqual(posts.map((s) => s.status), [502, 201]);
    const retry = events.find((e) => e.type === 'retry');
    assert.ok(retry.retryAfterMs >= 1000 && retry.delayMs >= retry.retryAfterMs, JSON.stringify(retry));
    assert.ok(posts[1].at_ms - posts[0].at_ms >= retry.retryAfterMs - 50, 'waited Retry-After before retrying');
  });

  test('429 and 503 from the way there: waits Retry-After, then the same key', async () => {
    const p = await createPayment();
    await control('POST', '/faults', {
      path: '/confirm',
      faults: [{ kind: 'status', status: 429, retry_after: 1 }, { kind: 'status', status: 503, retry_after: 1 }, { kind: 'drop_before' }],
    });
    const { c } = newClient();
    const out = await c.confirmPayment({ ...p, paymentMethod: 'pm_card_ok' });
    assert.equal(out.status, 'succeeded');
    const { posts } = await oneAttempt(p, { requests: 4, status: 'succeeded' });
    assert.deepEqual(posts.map((s) => s.fault === 'status' ? s.status : (s.fault || s.status)), [429, 503, 'drop_before', 201]);
    assert.ok(posts[1].at_ms - posts[0].at_ms >= 950 && posts[2].at_ms - posts[1].at_ms >= 950, 'Retry-After honoured');
  });

  test('a reload while the first request is at the PSP: 409 in flight, then the replay; one charge', async () => {
    const p = await createPayment();
    const storage = new MemoryStorage(); // the tab's sessionStorage, kept across the reload
    await control('POST', '/psp/hold');
    const first = newClient({ storage }).c.confirmPayment({ ...p, paymentMethod: 'pm_card_ok' }).catch((e) => e);
    assert.equal((await control('GET', '/psp/arrived')).arrived, true, 'the first request reached the PSP');
    // The reloaded page's client finds the attempt and resumes it.
    const { c, events } = newClient({ storage });
    const kept = c.pendingAttempt(p.paymentId);
    assert.ok(kept, 'the attempt survived the reload');
    const resumed = c.resumePayment(p);
    // Let the resumed request meet the held one at least once, then release.
    for (let i = 0; i < 100 && !events.some((e) => e.type === 'retry'); i++) await new Promise((r) => setTimeout(r, 50));
    await control('POST', '/psp/release');
    const out = await resumed;
    assert.equal(out.status, 'succeeded');
    assert.equal(out.key, kept.key);
    const retry = events.find((e) => e.type === 'retry');
    assert.equal(retry.reason, '409 in flight');
    assert.ok(retry.delayMs >= 1000, 'Retry-After of the 409 honoured');
    assert.equal((await first).status, 'succeeded');
    await oneAttempt(p, { status: 'succeeded' });
  });

  test('never retries a refusal: 402, 422, 400, 401, 404', async () => {
    const declined = await createPayment();
    const { c } = newClient();
    const out = await c.confirmPayment({ ...declined, paymentMethod: 'pm_card_declined' });
    assert.equal(out.status, 'declined');
    assert.equal(out.declineCode, 'card_declined');
    await oneAttempt(declined, { requests: 1, status: 'declined' });

    const cases = [
      [422, '/problems/confirm-mismatch', (p) => c.confirmPayment({ ...p, paymentMethod: 'pm_card_ok', amount: 1 })],
      [400, '/problems/invalid-request', (p) => c.confirmPayment({ ...p, paymentMethod: 'pm\u0001' })],
      [401, '/problems/unauthorized', (p) => newClient({ publishableKey: 'pk_notakeyofanymerchantatallxxxxxxxx' }).c.confirmPayment({ ...p, paymentMethod: 'pm_card_ok' })],
      [404, '/problems/not-found', (p) => c.confirmPayment({ ...p, clientSecret: `${p.paymentId}_secret_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa`, paymentMethod: 'pm_card_ok' })],
    ];
    for (const [status, type, confirm] of cases) {
      const p = await createPayment();
      await assert.rejects(confirm(p), (err) => err instanceof GatewayError && err.status === status && err.type === type,
        `${status} ${type}`);
      const seen = await control('GET', `/seen?payment=${p.paymentId}`);
      assert.equal(confirms(seen).length, 1, `${status}: sent once`);
      const state = await control('GET', `/state?payment=${p.paymentId}`);
      assert.equal(state.charges, 0);
      assert.equal(state.status, 'requires_confirmation');
    }
  });

  test('gives up, then polls GET and finds the charge instead of posting again', async () => {
    const p = await createPayment();
    const attempts = 3;
    await control('POST', '/faults', { path: '/confirm', faults: Array(attempts).fill({ kind: 'drop_after' }) });
    const { c, events } = newClient({ retry: { ...FAST, maxAttempts: attempts } });
    const out = await c.confirmPayment({ ...p, paymentMethod: 'pm_card_ok' });
    assert.equal(out.status, 'succeeded');
    assert.ok(events.some((e) => e.type === 'gave_up'));
    const { seen } = await oneAttempt(p, { requests: attempts, status: 'succeeded' });
    const afterLastPost = seen.slice(seen.lastIndexOf(confirms(seen).at(-1)) + 1);
    assert.ok(afterLastPost.length >= 1 && afterLastPost.every((s) => s.method === 'GET'), 'only GETs after giving up');
  });

  test('gives up unknown when the confirm never got there; "try again" resumes the same key', async () => {
    const p = await createPayment();
    await control('POST', '/faults', { path: '/confirm', faults: Array(2).fill({ kind: 'drop_before' }) });
    const { c } = newClient({ retry: { ...FAST, maxAttempts: 2 } });
    const out = await c.confirmPayment({ ...p, paymentMethod: 'pm_card_ok' });
    assert.equal(out.status, 'unknown');
    const kept = c.pendingAttempt(p.paymentId);
    assert.ok(kept, 'the attempt is kept for "try again"');
    let state = await control('GET', `/state?payment=${p.paymentId}`);
    assert.equal(state.charges, 0);
    const again = await c.resumePayment(p);
    assert.equal(again.status, 'succeeded');
    assert.equal(again.key, kept.key);
    await oneAttempt(p, { requests: 3, status: 'succeeded' });
  });

  test('a double click is one request', async () => {
    const p = await createPayment();
    const { c } = newClient();
    const [a, b] = await Promise.all([
      c.confirmPayment({ ...p, paymentMethod: 'pm_card_ok' }), c.confirmPayment({ ...p, paymentMethod: 'pm_card_ok' }),
    ]);
    assert.equal(a, b);
    await oneAttempt(p, { requests: 1, status: 'succeeded' });
  });

  test('3-D Secure: requires_action with the redirect, attempt kept; retrievePayment reads it', async () => {
    const p = await createPayment();
    const { c } = newClient();
    const out = await c.confirmPayment({ ...p, paymentMethod: 'pm_card_3ds' });
    assert.equal(out.status, 'requires_action');
    assert.equal(out.nextAction.type, 'redirect');
    assert.ok(c.pendingAttempt(p.paymentId));
    const read = await c.retrievePayment(p);
    assert.equal(read.status, 'requires_action');
    assert.equal(read.client_secret, undefined, 'the client secret is not shown again');
  });
});
