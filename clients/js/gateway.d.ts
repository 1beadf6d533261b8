// Types of the gateway's browser client (gateway.js). The client's own types
// come first; the API's objects it reads and sends (Payment, Problem,
// ConfirmPaymentRequest and the schemas they use) follow, generated from the
// OpenAPI document (api/openapi.json) by clients/js/gen: `go generate
// ./clients/js` rewrites them, and `make test` fails while they differ.

/** How the client retries an attempt and then looks for its outcome. */
export interface RetryOptions {
  /** Requests per attempt before giving up and polling (8). */
  maxAttempts?: number;
  /** The first retry waits up to this long; each further one up to twice as long (250). */
  baseDelayMs?: number;
  /** The cap of that wait; Retry-After may ask for longer, and is honoured (5000). */
  maxDelayMs?: number;
  /** A request that takes longer is abandoned and retried with the same key (30000). */
  requestTimeoutMs?: number;
  /** After giving up: how often GET /payments/{id} is asked (1000) ... */
  pollIntervalMs?: number;
  /** ... and for how long (15000). */
  pollTimeoutMs?: number;
}

/** What the client reports as it works; for logs and tests, never needed. */
export type ClientEvent =
  | { type: 'attempt' | 'resume'; paymentId: string; key: string }
  | { type: 'request'; paymentId: string; key: string; attempt: number }
  | { type: 'retry'; paymentId: string; key: string; attempt: number; delayMs: number; retryAfterMs: number | null; reason: string }
  | { type: 'gave_up'; paymentId: string; key: string; attempts: number; reason: string }
  | { type: 'look_up'; paymentId: string; problem: ProblemType }
  | { type: 'poll'; paymentId: string; status?: PaymentStatus; error?: string }
  | { type: 'outcome'; paymentId: string; status: OutcomeStatus; key: string | null };

/** The Web Storage methods the client uses (sessionStorage by default). */
export interface AttemptStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

export interface ClientOptions {
  /** The merchant's publishable key (pk_...). Never a secret key. */
  publishableKey: string;
  /** The gateway's URL, e.g. "https://pay.example"; "" for the page's own origin. */
  baseUrl?: string;
  retry?: RetryOptions;
  /** Where attempts are kept across reloads: sessionStorage by default. */
  storage?: AttemptStorage;
  fetch?: typeof fetch;
  /** A number in [0, 1) for the jitter: Math.random by default. */
  random?: () => number;
  sleep?: (ms: number) => Promise<void>;
  onEvent?: (event: ClientEvent) => void;
}

export interface ConfirmParams {
  /** The payment's id (pay_...), from the merchant's server. */
  paymentId: string;
  /** The payment's client_secret, from the merchant's server. */
  clientSecret: string;
  /** The PSP client's result: a payment method (Stripe, the fake PSP) or Toss's paymentKey. */
  paymentMethod?: ConfirmPaymentRequest['payment_method'];
  /** Checked against the payment when given: 422 confirm-mismatch otherwise. */
  amount?: ConfirmPaymentRequest['amount'];
  /** Checked against the payment's merchant_order_id when given (Toss's orderId). */
  orderId?: ConfirmPaymentRequest['order_id'];
}

/**
 * - succeeded: charged (201);
 * - declined: declined, failed or canceled (402): show it; a new try needs a new payment;
 * - requires_action: the PSP waits for the customer: do what nextAction says (or wait for a deposit);
 * - processing: accepted and not settled yet (or in review): poll, or tell the customer;
 * - unknown: the gateway could not be reached, or the confirm never got there: nothing
 *   shows a charge; the attempt stays stored and "try again" resumes it with its key.
 */
export type OutcomeStatus = 'succeeded' | 'declined' | 'requires_action' | 'processing' | 'unknown';

export interface Outcome {
  status: OutcomeStatus;
  payment: Payment | null;
  nextAction: NextAction | null;
  declineCode: string | null;
  /** The attempt's Idempotency-Key. */
  key: string | null;
  /** The answer was stored by an earlier request with the same key. */
  replayed: boolean;
}

export interface StoredAttempt {
  key: string;
  /** The exact body every request of the attempt sends. */
  body: string;
  started: number;
}

export declare const DEFAULT_RETRY: Readonly<Required<RetryOptions>>;
export declare const STORAGE_PREFIX: string;

export declare class GatewayError extends Error {
  constructor(message: string, details?: { status?: number; problem?: unknown; cause?: unknown });
  /** HTTP status; 0 when there was no answer. */
  status: number;
  /** The RFC 9457 problem the gateway answered, when it did. */
  problem: Problem | null;
  /** The problem's stable type, e.g. "/problems/confirm-mismatch". */
  type: ProblemType | null;
}

export declare class MemoryStorage implements AttemptStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

export declare class GatewayClient {
  constructor(options: ClientOptions);
  /** Confirms the payment: one attempt, one key, until a final answer; a stored attempt is resumed. */
  confirmPayment(params: ConfirmParams): Promise<Outcome>;
  /** Resumes the payment's stored attempt (after a reload); null when none. */
  resumePayment(params: { paymentId: string; clientSecret: string }): Promise<Outcome | null>;
  /** The attempt stored for a payment, or null. */
  pendingAttempt(paymentId: string): StoredAttempt | null;
  /** Drops a payment's stored attempt (only when the page gives that payment up). */
  forgetAttempt(paymentId: string): void;
  /** The payment as it stands now. */
  retrievePayment(params: { paymentId: string; clientSecret: string }): Promise<Payment>;
  /** Polls the payment until it is settled or waits for the customer, for at most pollTimeoutMs. */
  waitForOutcome(params: { paymentId: string; clientSecret: string }): Promise<Outcome>;
}

/** The outcome a page shows for a payment as the gateway rendered it. */
export declare function outcomeOfPayment(payment: Payment, key?: string | null, replayed?: boolean): Outcome;
export declare function backoffDelay(attempt: number, retry: { baseDelayMs: number; maxDelayMs: number }, random?: () => number): number;
export declare function retryAfterMs(value: string | null, now?: number): number | null;
export declare function newIdempotencyKey(): string;

// BEGIN generated from api/openapi.json by `go generate ./clients/js`: edit the document, not these lines.

/** A payment, as every payment endpoint returns it. */
export interface Payment {
  /**
   * Where the payment was sent, in order: one attempt per PSP account it went to, the current one
   * last. A next attempt is made at the next account of the merchant's route only after the
   * previous one certainly did nothing (design §16); the current attempt's account and order id are
   * the payment's, and every later call about the payment (lookups, refunds, captures, voids) goes
   * there. Answers stored before attempts were shown leave it out.
   */
  attempts?: PaymentAttempt[];
  /** The payment's id. */
  id: string;
  status: PaymentStatus;
  /** In the currency's minor units. */
  amount: number;
  /** ISO 4217 code, upper case. */
  currency: string;
  /** The PSP token the payment was made with. */
  payment_method: string;
  /**
   * The order id sent to the PSP by the current attempt, a function of (merchant, Idempotency-Key,
   * attempt): every retry sends the same one; a next attempt at another account has its own (see
   * attempts).
   */
  merchant_order_id: string;
  /** The PSP's reference of the charge; null until the PSP has one. */
  psp_reference: string | null;
  /**
   * Why the PSP declined (`status: declined`), why the payment failed (`not_processed`,
   * `rejected_by_psp`) or was canceled (`confirmation_expired`); null otherwise.
   */
  decline_code: string | null;
  /** As sent; empty when none was. */
  description: string;
  /**
   * As sent; empty when none was, and always empty (`{}`) in the answers to a publishable key (a
   * customer's browser): the merchant's metadata stays on its server.
   */
  metadata: Record<string, string>;
  /** What succeeded refunds of this payment gave back, in the currency's minor units. */
  amount_refunded: number;
  /** True when the whole amount has been refunded. */
  refunded: boolean;
  /** RFC 3339, UTC. */
  created_at: string;
  /**
   * Two-step checkout: when a payment awaiting confirmation is canceled if nobody confirms it (RFC
   * 3339, UTC). Present while `status` is `requires_confirmation` and on a `canceled` payment.
   */
  expires_at?: string;
  checkout?: Checkout;
  next_action?: NextAction;
  /**
   * In the answer that created a payment with `"confirm": false`, and nowhere else (its replays
   * included): the secret the merchant's server hands to the customer's browser, which presents it
   * with a publishable key (`Client-Secret` header) to read and confirm this one payment. Keep it
   * out of logs and URLs; it is stored only as a hash.
   */
  client_secret?: string;
  /**
   * Present on a payment created with `"capture_method": "manual"`: it is authorized first and
   * captured later. Absent on a payment charged at once.
   */
  capture_method?: 'manual';
  /**
   * Manual capture: what a capture can still take (the whole amount while `requires_capture`, else
   * 0), in minor units.
   */
  amount_capturable?: number;
  /**
   * Manual capture: what the capture took (at most `amount`; a partial capture released the rest).
   * Refunds give back at most this.
   */
  amount_captured?: number;
  /**
   * Manual capture: when the authorization stops being capturable (RFC 3339, UTC); present while
   * `requires_capture`. The reconciler records it `canceled` (`authorization_expired`) after it.
   */
  capture_before?: string;
  /**
   * Why a `canceled` payment was canceled by `POST /payments/{id}/cancel`, or
   * `authorization_expired` when its authorization lapsed.
   */
  cancellation_reason?: 'duplicate' | 'fraudulent' | 'requested_by_customer' | 'abandoned' | 'authorization_expired';
}

/** One attempt of a payment at one PSP account. */
export interface PaymentAttempt {
  /** 1 for the first attempt. */
  attempt: number;
  /**
   * The PSP account it was sent to, as configured (GATEWAY_PSP_ACCOUNTS), or the adapter's name
   * with one PSP.
   */
  account: string;
  /**
   * The order id sent to that account: a function of (merchant, Idempotency-Key, attempt number),
   * so no two attempts share one.
   */
  order_id: string;
  /**
   * The current attempt: the payment's status. An earlier one: not_processed (it certainly did
   * nothing; not yet checked at its account), absent (checked: its account holds nothing),
   * extra_charge (its account charged it anyway while another attempt charged: being given back),
   * extra_returned (that charge was refunded or voided), charged (its account charged it anyway and
   * no other attempt did: the payment is in requires_review).
   */
  outcome: string;
  /** The account's own id for the charge, when it holds one. */
  psp_reference: string | null;
}

/**
 * - `processing`: not finished yet (retry the create with the same key, or poll).
 * - `succeeded`: charged.
 * - `declined`: the PSP declined it (`decline_code`).
 * - `failed`: the PSP never processed it.
 * - `requires_review`: nobody could find out whether the PSP charged it; ops decide.
 * - `requires_confirmation`: created with `"confirm": false` and not charged yet; `POST
 *   /payments/{id}/confirm` charges it. Canceled when nobody confirms it before `expires_at`.
 * - `requires_action`: the provider waits for the customer: a 3-D Secure step (`next_action` says
 *   what the front end must do) or a deposit to a virtual account (no `next_action`). Settled later
 *   by the provider's notification or the gateway's own look; poll `GET /payments/{id}`.
 * - `requires_capture`: authorized (`"capture_method": "manual"`): the provider holds
 *   `amount_capturable` until `POST /payments/{id}/capture` takes it (all or part, the rest
 *   released), `POST /payments/{id}/cancel` releases it, or it lapses at `capture_before`.
 * - `canceled`: nothing was or will be taken: never confirmed before `expires_at` (`decline_code:
 *   confirmation_expired`), or an authorization voided or lapsed (`cancellation_reason`).
 */
export type PaymentStatus =
  | 'processing'
  | 'succeeded'
  | 'declined'
  | 'failed'
  | 'requires_review'
  | 'requires_confirmation'
  | 'requires_action'
  | 'requires_capture'
  | 'canceled';

/**
 * Present while `status` is `requires_confirmation`: what the front end needs to start the payment
 * provider's own client (its payment widget, or Stripe.js) before the payment is confirmed. Every
 * value is public.
 */
export interface Checkout {
  /** The provider the payment will be confirmed with (`toss`, `stripe`, `fake`, `fakehttp`). */
  psp: string;
  /**
   * The provider's client to start: Toss's payment widget, Stripe.js (Elements), or none (the fake
   * provider's payment methods are fixed names).
   */
  client: 'toss_payment_widget' | 'stripe_js' | 'none';
  /**
   * The provider's public key for its client (Toss's client key, Stripe's publishable key), when
   * the gateway is configured with one.
   */
  publishable_key?: string;
  /** The order id to open the client with: the payment's `merchant_order_id`. */
  order_id: string;
  /**
   * The payment's amount **in the provider's own units** for `currency` (Stripe writes ISK with two
   * decimals, say), as its client expects it.
   */
  amount: number;
  /** ISO 4217 code, upper case (Stripe.js wants it in lower case). */
  currency: string;
  /**
   * The confirm's field for the client's result: `payment_key` (Toss's `paymentKey`) or
   * `payment_method` (a payment method id).
   */
  confirm_with: 'payment_key' | 'payment_method';
}

/**
 * Present while `status` is `requires_action` and the provider asks something of the front end.
 * `client_secret` lets the provider's client library act on the charge: give it to the paying
 * customer's browser only.
 */
export interface NextAction {
  /**
   * `redirect` (send the customer's browser to `url`), or a kind the provider's client library
   * handles (`use_stripe_sdk`: Stripe.js `handleNextAction` with `client_secret`).
   */
  type: string;
  /** Where to send the customer (`redirect`). */
  url?: string;
  /** The provider's client secret of the charge, for its client library. */
  client_secret?: string;
}

/**
 * An RFC 9457 problem. `type` is stable; `detail` says what to fix; a 5xx never shows internal
 * details (they are logged under `request_id`).
 */
export interface Problem {
  type: ProblemType;
  /** A short summary of the problem type. */
  title: string;
  /** The HTTP status, repeated. */
  status: number;
  /** What went wrong for this request and what to fix. */
  detail?: string;
  /** The request's path. */
  instance: string;
  /** Equals the `X-Request-Id` response header. */
  request_id: string;
  /** The invalid fields (`invalid-request`). */
  errors?: FieldError[];
  /**
   * The existing payment (`idempotency-key-reused`), or the payment a refund was refused for, or
   * the payment a confirm cannot confirm (`payment-not-confirmable`, `confirm-mismatch`).
   */
  payment_id?: string;
  /** The existing refund (`idempotency-key-reused` on a refund's key). */
  refund_id?: string;
}

/**
 * The stable problem type; branch on it, not on `title` or `detail`.
 *
 * - `/problems/invalid-request` (400): The request body is malformed, fails validation or has an
 *   unknown field, its Content-Type is not JSON, or (GET /payments) the `idempotency_key` query
 *   parameter is missing or repeated. `errors` lists the invalid fields. Nothing was stored: fix
 *   the request; the same Idempotency-Key may be reused.
 * - `/problems/invalid-idempotency-key` (400): The `Idempotency-Key` header (or the
 *   `idempotency_key` query parameter) is missing, repeated, empty, longer than 255 characters or
 *   not visible ASCII. Nothing was stored: fix it and use a new key.
 * - `/problems/unauthorized` (401): The API key is missing, malformed, unknown or revoked. Nothing
 *   was stored: fix the credentials (`Authorization: Bearer sk_...`).
 * - `/problems/not-found` (404): No such payment for this merchant (another merchant's payment is
 *   not found either), or no such path.
 * - `/problems/method-not-allowed` (405): The path exists but not with this method; the `Allow`
 *   header lists the methods it has.
 * - `/problems/request-in-flight` (409): A request with this Idempotency-Key is still being
 *   processed (the gateway waited a bounded time for it). Nothing was stored for this attempt: wait
 *   `Retry-After` seconds and retry with the **same** key and body.
 * - `/problems/idempotency-key-reused` (409): The key created a payment earlier, but its stored
 *   response has expired (retention, 7 days by default). `payment_id` names the existing payment:
 *   look it up with `GET /payments/{payment_id}`; never re-run it with a new key.
 * - `/problems/request-too-large` (413): The request body is over the size limit (64 KiB by
 *   default). Nothing was stored: send less.
 * - `/problems/idempotency-key-mismatch` (422): The key was used earlier with a different request
 *   (amount, currency, payment method, description or metadata differ). A client bug: a new payment
 *   needs a new key. Nothing changed; the original request still replays.
 * - `/problems/psp-cannot-accept` (422): The payment provider can never accept this request
 *   (currency, amount units or limits); `errors` names the field. Nothing was stored or sent: fix
 *   the request; the same key may be reused.
 * - `/problems/rate-limited` (429): This merchant sent more requests than its rate limit allows.
 *   Never stored as an idempotent response: back off for `Retry-After` seconds, then retry with the
 *   same key.
 * - `/problems/internal` (500): An unexpected failure; details are logged under `request_id` and
 *   never shown. Retrying with the same Idempotency-Key is safe (it never charges twice); quote
 *   `request_id` when it persists.
 * - `/problems/psp-outcome-unknown` (502): The payment provider did not confirm the outcome
 *   (timeout, 5xx, connection reset). Not stored: retry after `Retry-After` seconds with the
 *   **same** key; the gateway asks the provider first and never charges twice.
 * - `/problems/psp-unavailable` (503): The payment provider certainly did not process the payment.
 *   Not stored: retry after `Retry-After` seconds with the **same** key.
 * - `/problems/service-unavailable` (503): The gateway cannot serve now (its database does not
 *   answer). Not stored: retry later with the same key.
 * - `/problems/payment-not-refundable` (409): The payment cannot be refunded now: it is not
 *   succeeded (processing, declined, failed or in review), or nothing is left to refund. Nothing
 *   was stored; the key stays free.
 * - `/problems/refund-exceeds-refundable` (422): The refund asks more than is left to refund (its
 *   pending, succeeded and in-review refunds are counted); `errors` says how much is left. Nothing
 *   was stored; the key stays free.
 * - `/problems/payment-not-confirmable` (409): The payment is not awaiting confirmation: it was
 *   created to be charged at once, another confirm (another key) took it, or it expired.
 *   `payment_id` names it: look it up. Nothing was stored; do not confirm it again.
 * - `/problems/confirm-mismatch` (422): The confirm's `amount` or `order_id` is not the payment's;
 *   `errors` names the field. Nothing was stored or sent to the provider: a front-end bug, or a
 *   tampered request.
 * - `/problems/notice-rejected` (400): A provider's notification that does not verify (a bad,
 *   missing or stale signature) or that names no payment; nothing changed.
 * - `/problems/forbidden` (403): These credentials cannot do this: a publishable key (`pk_…`) on an
 *   endpoint that takes the secret API key (a publishable key only reads and confirms the payment
 *   whose client secret it presents), or a secret API key sent by a browser (a request with an
 *   `Origin` header). Nothing was read or stored: create payments on the merchant's server with the
 *   secret key. From a CORS preflight: the method or a request header is not one browsers may use.
 * - `/problems/origin-not-allowed` (403): The request's `Origin` is not one the merchant of the
 *   publishable key allows, or (a CORS preflight) one no merchant allows. Nothing was read or
 *   stored.
 * - `/problems/conflict` (409): The request conflicts with the current state (a merchant with as
 *   many webhook endpoints as it may have). Nothing changed.
 * - `/problems/payment-not-capturable` (409): The payment is not an authorization that can be
 *   captured (charged at once, captured already, canceled); `payment_id` names it. Nothing was
 *   stored; the key stays free.
 * - `/problems/authorization-expired` (409): The authorization lapsed (`capture_before` passed)
 *   before the capture; `payment_id` names the payment. Nothing was stored.
 * - `/problems/capture-exceeds-authorized` (422): `amount_to_capture` is more than the authorized
 *   amount. Nothing was stored; the key stays free.
 * - `/problems/payment-not-cancelable` (409): The payment cannot be canceled: it took money (refund
 *   it instead) or it already ended; `payment_id` names it. Nothing was stored; the key stays free.
 * - `/problems/canceled-by-key` (409): The Idempotency-Key was canceled by `POST
 *   /payments/cancel_by_key` before any payment was made under it: nothing was or will be charged,
 *   whatever the body. Stored: every request with the key answers this. Use a new key for a new
 *   payment.
 */
export type ProblemType =
  | '/problems/invalid-request'
  | '/problems/invalid-idempotency-key'
  | '/problems/unauthorized'
  | '/problems/not-found'
  | '/problems/method-not-allowed'
  | '/problems/request-in-flight'
  | '/problems/idempotency-key-reused'
  | '/problems/request-too-large'
  | '/problems/idempotency-key-mismatch'
  | '/problems/psp-cannot-accept'
  | '/problems/rate-limited'
  | '/problems/internal'
  | '/problems/psp-outcome-unknown'
  | '/problems/psp-unavailable'
  | '/problems/service-unavailable'
  | '/problems/payment-not-refundable'
  | '/problems/refund-exceeds-refundable'
  | '/problems/payment-not-confirmable'
  | '/problems/confirm-mismatch'
  | '/problems/notice-rejected'
  | '/problems/forbidden'
  | '/problems/origin-not-allowed'
  | '/problems/conflict'
  | '/problems/payment-not-capturable'
  | '/problems/authorization-expired'
  | '/problems/capture-exceeds-authorized'
  | '/problems/payment-not-cancelable'
  | '/problems/canceled-by-key';

export interface FieldError {
  /** The field, e.g. `amount` or `metadata.order`. */
  field: string;
  /** What is wrong with it. */
  reason: string;
}

/**
 * The provider client's result. Send `payment_method` (Stripe, the fake provider) or `payment_key`
 * (Toss's `paymentKey`), not both; neither when the payment was created with its payment method.
 * `amount` and `order_id`, when sent, must be the payment's (Toss's widget hands both to the
 * success URL): a difference is a 422 `confirm-mismatch` before anything is sent.
 */
export interface ConfirmPaymentRequest {
  /** A payment method id (`pm_...`). */
  payment_method?: string;
  /** Toss's `paymentKey` from the widget's success URL. */
  payment_key?: string;
  /** The amount the front end was shown, in minor units: checked against the payment's. */
  amount?: number;
  /**
   * The order id the client was opened with (Toss's `orderId`): checked against the payment's
   * `merchant_order_id`.
   */
  order_id?: string;
}

// END generated.
