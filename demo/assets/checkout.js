// The reference checkout page: the merchant's server (/demo/orders) creates
// the order's payment; this page confirms it with the gateway's client,
// which keeps one key per attempt (across reloads too), retries safely and
// says how it ended. The state the page shows is #status[data-state]:
// loading, ready, working, succeeded, declined, requires_action,
// processing, retry (could not tell: "try again" resumes the same attempt)
// or error.
import { GatewayClient, GatewayError, outcomeOfPayment } from '/demo/gateway.js';

const $ = (id) => document.getElementById(id);
const config = document.body.dataset;
const ORDER = 'demo.checkout.order';

// Test knobs: ?attempts=N&poll_ms=M shorten the client's patience.
const params = new URLSearchParams(location.search);
const retry = { maxAttempts: 10, baseDelayMs: 250, maxDelayMs: 3000, pollIntervalMs: 1000, pollTimeoutMs: 10000 };
if (params.has('attempts')) retry.maxAttempts = Number(params.get('attempts'));
if (params.has('poll_ms')) retry.pollTimeoutMs = Number(params.get('poll_ms'));

const client = new GatewayClient({
  baseUrl: config.apiBase,
  publishableKey: config.publishableKey,
  retry,
  onEvent: trace,
});

let order = null;

// trace shows what the client does, one line per step: the attempt's key,
// each retry with its reason and wait, and the outcome.
function trace(e) {
  const key = (k) => `${k.slice(0, 8)}…`;
  const line = {
    attempt: () => `new attempt, key ${key(e.key)}`,
    resume: () => `resuming the attempt, key ${key(e.key)}`,
    retry: () => `request #${e.attempt}: ${e.reason}; again in ${(e.delayMs / 1000).toFixed(1)} s, same key`,
    gave_up: () => `gave up after ${e.attempts} requests (${e.reason}): reading the payment`,
    look_up: () => `the payment was taken by another attempt: reading it`,
    poll: () => (e.status ? `the payment is ${e.status}` : 'could not read the payment'),
    outcome: () => `outcome: ${e.status}`,
  }[e.type];
  if (!line) return;
  const li = document.createElement('li');
  li.textContent = line();
  const log = $('log');
  log.append(li);
  while (log.children.length > 12) log.firstElementChild.remove();
}

function money(amount, currency) {
  const digits = new Intl.NumberFormat('en', { style: 'currency', currency }).resolvedOptions().maximumFractionDigits;
  return new Intl.NumberFormat('en', { style: 'currency', currency }).format(amount / 10 ** digits);
}

function show(state, title, detail = '', actions = {}) {
  $('status').dataset.state = state;
  $('status-title').textContent = title;
  $('status-detail').textContent = detail;
  $('try-again').hidden = !actions.tryAgain;
  $('start-over').hidden = !actions.startOver;
  const next = $('next-action');
  next.hidden = !actions.nextAction;
  if (actions.nextAction) next.href = actions.nextAction;
  $('pay').disabled = state !== 'ready';
  for (const input of document.querySelectorAll('input[name=method]')) input.disabled = state !== 'ready';
}

function ids() {
  return { paymentId: order.payment_id, clientSecret: order.client_secret };
}

// The merchant's server creates the order's payment once per order; the
// page keeps it for the tab's life, so that a reload confirms the same one.
async function currentOrder() {
  const saved = sessionStorage.getItem(ORDER);
  if (saved) return JSON.parse(saved);
  const res = await fetch('/demo/orders', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
  if (!res.ok) throw new Error((await res.json().catch(() => ({}))).error ?? `the shop answered ${res.status}`);
  const o = await res.json();
  sessionStorage.setItem(ORDER, JSON.stringify(o));
  return o;
}

function settle(outcome) {
  const p = outcome.payment;
  switch (outcome.status) {
    case 'succeeded':
      show('succeeded', 'Payment succeeded', `${money(p.amount, p.currency)} paid · ${p.id}`, { startOver: true });
      break;
    case 'declined':
      show('declined', 'Payment declined', `Your bank said "${outcome.declineCode}". Nothing was charged; try another card.`, { startOver: true });
      break;
    case 'requires_action': {
      const url = outcome.nextAction?.url;
      const absolute = url && /^https?:\/\//.test(url) ? url : null;
      show('requires_action', 'Needs action',
        outcome.nextAction ? 'Your bank wants to check it is you (3-D Secure). Continue, then come back to this page.'
          : 'Waiting for your bank transfer to arrive. This page shows the result once it has.',
        { nextAction: absolute, tryAgain: true });
      $('try-again').textContent = 'Check again';
      break;
    }
    case 'processing':
      show('processing', 'Processing', 'The payment was accepted and is being finished.', { tryAgain: true });
      $('try-again').textContent = 'Check again';
      break;
    default:
      show('retry', 'Could not reach the payment service',
        'Trying again continues this same payment: you will not be charged twice.', { tryAgain: true });
      $('try-again').textContent = 'Try again';
  }
}

function fail(err) {
  if (err instanceof GatewayError) {
    show('error', 'Payment refused', err.message, { startOver: true });
  } else {
    show('error', 'Something went wrong', String(err?.message ?? err), { startOver: true });
  }
}

async function run(fn) {
  show('working', 'Paying…', 'Do not close this page.');
  try {
    settle(await fn());
  } catch (err) {
    fail(err);
  }
}

$('pay').addEventListener('click', () => {
  const method = document.querySelector('input[name=method]:checked').value;
  run(() => client.confirmPayment({ ...ids(), paymentMethod: method }));
});

$('try-again').addEventListener('click', () => {
  if (!order || !client.pendingAttempt(order.payment_id)) {
    start(); // nothing was under way: read the order again
    return;
  }
  run(() => client.resumePayment(ids()));
});

$('start-over').addEventListener('click', () => {
  client.forgetAttempt(order.payment_id);
  sessionStorage.removeItem(ORDER);
  location.reload();
});

async function start() {
  try {
    order = await currentOrder();
  } catch (err) {
    show('error', 'The shop could not prepare your order', String(err.message ?? err), { startOver: true });
    return;
  }
  $('amount').textContent = money(order.amount, order.currency);
  $('item').textContent = order.description || 'Your order';
  $('payment-id').textContent = order.payment_id;
  // A reload during an attempt resumes it, with its key: never a second charge.
  if (client.pendingAttempt(order.payment_id)) {
    await run(() => client.resumePayment(ids()));
    return;
  }
  try {
    const p = await client.retrievePayment(ids());
    if (p.status !== 'requires_confirmation') {
      settle(outcomeOfPayment(p));
      return;
    }
  } catch (err) {
    if (err instanceof GatewayError) {
      fail(err);
      return;
    }
    show('retry', 'Could not reach the payment service', 'Check your connection, then try again.', { tryAgain: true });
    return;
  }
  show('ready', 'Choose how to pay', '');
}

start();
