// Types of the gateway's browser client (gateway.js).

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
  | { type: 'look_up'; paymentId: string; problem: string }
  | { type: 'poll'; paymentId: string; status?: string; error?: string }
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
  paymentMethod?: string;
  /** Checked against the payment when given: 422 confirm-mismatch otherwise. */
  amount?: number;
  orderId?: string;
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

export interface NextAction {
  type: string;
  url?: string;
  client_secret?: string;
}

/** The payment as the gateway renders it (see the OpenAPI document's Payment). */
export interface Payment {
  id: string;
  status: string;
  amount: number;
  currency: string;
  payment_method: string;
  merchant_order_id: string;
  psp_reference: string | null;
  decline_code: string | null;
  next_action?: NextAction;
  [field: string]: unknown;
}

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
  problem: { type: string; title: string; status: number; detail?: string; [field: string]: unknown } | null;
  /** The problem's stable type, e.g. "/problems/confirm-mismatch". */
  type: string | null;
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
