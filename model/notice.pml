/*
 * notice.pml: a PSP's notifications against the gateway's final answers,
 * checked by SPIN over every interleaving of three replicas receiving them,
 * the subject's own flow (the worker, the reconciler's looks, the review
 * queue) and a PSP whose money may move after the gateway answered that
 * none did (a charge landing past its creation window, a refund carried
 * out late). The subject is one payment, or with -DREFUND=1 one refund.
 * Go: notices/notices.go (Notices.payment, contradicted, settleAction;
 * Notices.refundOf, refundContradicted), payments.ApplyCharge and
 * ApplyRefund, mysql/refund.go movePayment; the adapters' ReadNotice
 * (psp/stripe/webhook.go, psp/toss/webhook.go).
 *
 * The PSP's truth is what it holds under the order id: nothing settled
 * yet (or a declined attempt), the subject's money moved (moved), or
 * something else (other: another amount; ApplyCharge's and ApplyRefund's
 * mismatch). The
 * subject's own flow settles with its evidence in the same step as its
 * write: charge.pml and refund.pml prove those settles right when they are
 * made; this model adds the money that moves after a final answer, and the
 * notifications that report it.
 *
 * A notification is delivered until a replica acknowledges it (a nil error
 * from Notices.Receive; a database error is a 503 and the PSP sends it
 * again), possibly once more after that (DUPS), to either replica. Its
 * content does not matter: the adapter reads the subject from the PSP as it
 * stands when it reads the notification. A replica's three steps are the
 * adapter's read (ReadNotice), the subject's read and the decision on it
 * (PaymentsByOrder, Notices.payment), and Resolve's transaction, which
 * decides again on the row it locked (the compare-and-set on the status
 * read); each input may go stale before the next step.
 *
 * Canceled is left out: only a payment nobody confirmed expires canceled,
 * and a charge only comes from a confirm, so no money moves to contradict
 * it (the code's contradiction branch treats it as it treats declined).
 */

#ifndef REFUND
#define REFUND 0        /* the subject is a refund (else a payment) */
#endif
#ifndef OTHER
#define OTHER 1         /* the PSP may come to hold another charge (refund) under the order id */
#endif
#ifndef DUPS
#define DUPS 2          /* deliveries the PSP makes once more after one was acknowledged */
#endif
#ifndef REPLICAS
#define REPLICAS 3      /* replicas receiving notifications (2 or 3) */
#endif
#ifndef DECLFINAL
#define DECLFINAL 1     /* a decline, once reported, is final at the PSP: nothing moves under the order id after it
                           (Stripe's adapter cancels the PaymentIntent before it reports the decline) */
#endif
#ifndef REDECIDE
#define REDECIDE 0      /* a write fenced by a status that moved since the read decides again on the status it finds */
#endif
#ifndef OTHERREF
#define OTHERREF 0      /* REFUND: another refund of the payment may take the amount a failed one gave back */
#endif

/* statuses (a refund has no declined: its decline is failed) */
#define S_PROC 1        /* processing: its key is held (a refund: pending, its key in progress) */
#define S_ACT  2        /* requires_action (a refund: pending at its PSP, its key completed) */
#define S_SUCC 3
#define S_DECL 4
#define S_FAIL 5
#define S_REV  6        /* requires_review */
#define FINAL(s) ((s) >= S_SUCC && (s) <= S_FAIL)

/* what the adapter read from the PSP (psp.Charge, psp.Refund) */
#define N_SUCC  1       /* the charge (refund) of the subject's amount succeeded */
#define N_DECL  2       /* declined (a refund's failed) */
#define N_OTHER 3       /* something else under the order id */
/* ApplyCharge (ApplyRefund): the status a report settles to */
#define APPLY(n) (n == N_SUCC -> S_SUCC : (n == N_OTHER -> S_REV : (REFUND -> S_FAIL : S_DECL)))
/* Notices.payment (refundOf): the report contradicts a final answer when
 * money moved that it denies, or the PSP holds something else */
#define CONTRA(n, s) (FINAL(s) && (n == N_OTHER || (n == N_SUCC && s != S_SUCC)))

#define AMOUNT 2        /* REFUND: the payment's amount */
#define AMT    1        /* the refund's */
#define BAMT   2        /* the other refund's (OTHERREF) */

/* ---- the rows ------------------------------------------------------------ */
byte  st = S_PROC;      /* payments.status (refunds.status) */
byte  reserved = AMT;   /* REFUND: payments.amount_reserved, the refund's share held since its claim */
bit   bheld;            /* OTHERREF: the other refund holds BAMT */

/* ---- the PSP ---------------------------------------------------------------- */
bit   moved;            /* money moved for the subject */
bit   other;            /* the PSP holds something else under its order id (never both) */
bit   declatt;          /* an attempt was declined */
bit   declrep;          /* a decline was reported to the gateway (DECLFINAL: no money moves after) */
byte  pend;             /* notifications still to be delivered */
byte  dups = DUPS;

bit   busy[3];          /* a replica between its read of the PSP and its last step */

/* ---- properties -------------------------------------------------------------- */
bit   p7_truth, p7_answer;   /* always 0: name the property in pan's message */

/* the final answer agrees with the PSP: succeeded ⇔ money moved, and nothing else under the order id */
#define AGREE (!FINAL(st) || (!other && ((st == S_SUCC) == moved)))
#define QUIET (pend == 0 && !busy[0] && !busy[1] && !busy[2])
/* p7 truth: once every notification was handled, the merchant's final
 *   answer is the PSP's truth, or the subject is in review */
#define CHECK assert(p7_truth || !QUIET || AGREE)

/* p7 answer: a final answer is taken back only to requires_review, and only
 *   when the PSP's truth contradicts it: never overwritten with another
 *   final answer; an agreeing or stale report changes nothing */
inline set(to) {
  assert(p7_answer || !FINAL(st) || (to == S_REV && !AGREE));
#if REFUND
  /* a failed refund gives its share back; one sent back to review takes it again */
  if
  :: st != S_FAIL && to == S_FAIL -> reserved = reserved - AMT
  :: st == S_FAIL && to != S_FAIL -> reserved = reserved + AMT
  :: else -> skip
  fi;
#endif
  st = to
}

/* movePayment: ErrExceedsPayment when the refund's amount no longer fits */
#define ROOM(to) (!REFUND || st != S_FAIL || to == S_FAIL || reserved + AMT <= AMOUNT)

/* ---- the PSP: its events, each sent as a notification -------------------- */
active proctype PSP() {
end_psp:
  do
  /* The money moves, once, at any moment: in time, or after the gateway
   * answered (a charge landing past its creation window, a refund carried
   * out after the gateway gave up on it); with DECLFINAL nothing moves
   * after a decline was reported. */
  :: atomic { !moved && !other && !(DECLFINAL && declrep) -> moved = 1; pend++; CHECK }
#if OTHER
  /* Or what it holds under the order id is something else. */
  :: atomic { !moved && !other && !(DECLFINAL && declrep) -> other = 1; pend++; CHECK }
#endif
  /* An attempt is declined. */
  :: atomic { !moved && !other && !declatt -> declatt = 1; pend++ }
  :: atomic { dups > 0 && (moved || other || declatt) -> dups--; pend++ }
  od
}

/* ---- the subject's own flow: evidence and write in one step -------------- */
active proctype Flow() {
end_flow:
  do
  /* Processing: the worker's settle (Store.Settle, Store.SettleRefund) or
   * the reconciler's, on the PSP's answer or a lookup: succeeded; declined
   * (a refund: failed) on the PSP's decline, final once reported; failed on
   * the reconciler's proof that nothing was charged; requires_action (a
   * refund accepted pending); a lookup that finds something else under the
   * order id: requires_review. */
  :: atomic { st == S_PROC && !other && moved -> set(S_SUCC); CHECK }
  :: atomic { st == S_PROC && !other && !moved && declatt -> declrep = 1; set(APPLY(N_DECL)); CHECK }
  :: atomic { st == S_PROC && !other && !moved -> if :: set(S_FAIL) :: set(S_ACT) fi; CHECK }
  :: atomic { st == S_PROC && other -> set(S_REV); CHECK }
  /* Waiting: the reconciler's look (recheckAction; the refund queue's
   * recheckRefund) settles from the PSP's answer. */
  :: atomic { st == S_ACT && !other && moved -> set(S_SUCC); CHECK }
  :: atomic { st == S_ACT && !other && !moved && declatt -> declrep = 1; set(APPLY(N_DECL)); CHECK }
  :: atomic { st == S_ACT && other -> set(S_REV); CHECK }
  /* In review: the review queue settles from the PSP's word (reexamine;
   * recheckRefund): found → succeeded; failed only on its proof (two
   * authoritative not-founds a creation window apart); something else
   * under the order id stays in review. */
  :: atomic { st == S_REV && !other && moved -> set(S_SUCC); CHECK }
  :: atomic { st == S_REV && !other && !moved -> set(S_FAIL); CHECK }
#if OTHERREF
  /* Another refund of the payment is claimed when its amount is free. */
  :: atomic { !bheld && reserved + BAMT <= AMOUNT -> bheld = 1; reserved = reserved + BAMT }
#endif
  od
}

/* ---- a replica receiving the PSP's notifications ------------------------- */
proctype Replica(byte me) {
  byte rep, seen, to;

end_wait:
  /* Notices.Receive → ReadNotice: the subject as the PSP holds it now
   * (Stripe: the PaymentIntent by id, a declined one canceled first; Toss:
   * the payment by key). Nothing settled at the PSP yet: nothing to do. */
  atomic {
    pend > 0 -> pend--; busy[me] = 1;
    if
    :: other -> rep = N_OTHER
    :: moved -> rep = N_SUCC
    :: !moved && !other && declatt -> rep = N_DECL; declrep = 1
    :: else -> busy[me] = 0; CHECK; goto end_wait
    fi
  };

  /* PaymentsByOrder (RefundsByOrder), and Notices.payment (refundOf)
   * decides on the status it read. */
  atomic {
    seen = st;
    if
    :: seen == S_ACT ->
         /* settleAction (a refund pending at its PSP: the queue's settle) */
         to = APPLY(rep)
#if defined(MUT_N_IGNORE)
    /* Mutant: the code before the fix: a report contradicting a final
     * answer is only logged. */
#elif defined(MUT_N_OVERWRITE)
    /* Mutant: the PSP's report is applied over the final answer. */
    :: FINAL(seen) && APPLY(rep) != seen -> to = APPLY(rep)
#elif defined(MUT_N_FAILREVIEW)
    /* Mutant: any report that differs sends a final answer to review,
     * also one that money did not move for a subject that moved it. */
    :: FINAL(seen) && APPLY(rep) != seen -> to = S_REV
#else
    /* contradicted (refundContradicted) → requires_review */
    :: CONTRA(rep, seen) -> to = S_REV
#endif
    :: else ->
         /* processing: HastenKey (and HastenLook); in review: HastenLook
          * (HastenRefundCheck); the same answer: settled already; money did
          * not move for a subject that moved it: Contradicted(kind, false),
          * nothing changed. Acknowledged. */
         rep = 0; seen = 0; busy[me] = 0; CHECK; goto end_wait
    fi
  };

  /* Resolve (ResolveRefund): the row locked, decided again on it. Its
   * status moved since the read: ErrFenced, "settled meanwhile",
   * acknowledged (REDECIDE: the contradiction judged on the status it
   * found). A refund sent back to review reserves its amount again:
   * ErrExceedsPayment when the payment cannot hold it, nothing changed,
   * logged and counted, acknowledged. A database error: 503, the PSP
   * sends the notification again. */
  atomic {
    if
#ifdef MUT_N_NOCAS
    /* Mutant: the write without the compare-and-set on the status read. */
    :: ROOM(to) -> set(to)
#else
    :: st == seen && ROOM(to) -> set(to)
#endif
    :: st == seen && !ROOM(to) -> skip
#if REDECIDE
    :: st != seen && CONTRA(rep, st) && ROOM(S_REV) -> set(S_REV)
    :: st != seen && !(CONTRA(rep, st) && ROOM(S_REV)) -> skip
#else
    :: st != seen -> skip
#endif
    :: pend++
    fi;
    busy[me] = 0; rep = 0; seen = 0; to = 0; CHECK;
    goto end_wait
  }
}

init {
  atomic {
    run Replica(0); run Replica(1);
#if REPLICAS > 2
    run Replica(2)
#endif
  }
}
