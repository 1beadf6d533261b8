/*
 * delivery.pml: webhook deliveries against the purge of old events,
 * checked by SPIN over every interleaving of the fan-out, a resend, the
 * reconciler's purge, one endpoint's dispatcher (claim, attempt, record)
 * and the database's clock. Two events of one merchant, one endpoint
 * subscribed to both; the endpoint may fail any attempt.
 * Go: webhooks/dispatch.go (Dispatcher.run, attempt), mysql/delivery.go
 * (FanOut, ClaimDeliveries, RecordDelivered, RecordFailed), mysql/event.go
 * (PurgeEvents), mysql/webhook.go (Resend), reconcile.Reconciler.Purge.
 *
 * The purge keeps every event with a delivery still pending, and a claim
 * fails, with its reason, a delivery whose event is gone (a resend that
 * read the event before the purge took it inserts one) and claims the
 * endpoint's others. MUT_D_PURGEPENDING and MUT_D_CLAIMERR are the code
 * before: a purge by age alone, and a claim that fails as a whole.
 *
 * Time: next_attempt_at is kept relative (ticks from now) and the Clock
 * moves every pending one a tick into the past, floored at 0 (due); a
 * claim pushes a delivery's to the lease's end, a failed attempt to its
 * back-off. An event ages past the retention at any moment after its
 * fan-out (LATEFAN: also before it).
 */

#ifndef LATEFAN
#define LATEFAN 0       /* an event may age past its retention before the fan-out made its delivery */
#endif
#ifndef RESEND
#define RESEND 1        /* an operator resends one event to the endpoint (gateway webhooks resend) */
#endif
#ifndef MAXTRY
#define MAXTRY 2        /* failed attempts before a delivery is past MaxAge and failed for good */
#endif

#define NEV 2
#define ND  3           /* deliveries: one per event from the fan-out, one from the resend */
#define LIM 2           /* deliveries one claim takes */
#define LEASE 2
#define BACKOFF 1

#define D_NONE 0
#define D_PEND 1        /* pending (claimed or not) */
#define D_DONE 2        /* delivered */
#define D_FAIL 3        /* failed */
#define F_AGE  1        /* … after its attempts, past MaxAge */
#define F_GONE 2        /* … because its event is gone ("event purged") */

/* ---- the rows ------------------------------------------------------------ */
bit   fanned[NEV];      /* events.fanned_out */
bit   old[NEV];         /* created_at past the retention */
bit   gone[NEV];        /* purged */
byte  dst[ND];          /* webhook_deliveries.status */
byte  dev[ND];          /* its event_id */
short nat[ND];          /* next_attempt_at, relative */
byte  att[ND];          /* attempts */
byte  why[ND];          /* last_error of a failed one */
bit   mine[ND];         /* claimed, its attempt not recorded yet */
byte  nd;               /* deliveries inserted */

/* ---- ghosts -------------------------------------------------------------------- */
bit   orphan[ND];       /* inserted when its event was already gone */
bit   got[NEV];         /* the endpoint received the event */
bit   p9_lost;          /* always 0: names the property in pan's message */

#define PENDING_OF(e) ((dst[0] == D_PEND && dev[0] == (e)) || (dst[1] == D_PEND && dev[1] == (e)) || \
                       (dst[2] == D_PEND && dev[2] == (e)))

inline insert(e) {
  d_step {
    assert(nd < ND);
    dst[nd] = D_PEND; dev[nd] = e; nat[nd] = 0; orphan[nd] = gone[e]; nd++
  }
}

/* ---- FanOut: the events not fanned out, in their order, one delivery each */
active proctype FanOut() {
end_fan:
  do
  :: atomic { !fanned[0] && !gone[0] -> fanned[0] = 1; insert(0) }
  :: atomic { fanned[0] && !fanned[1] && !gone[1] -> fanned[1] = 1; insert(1) }
  od
}

#if RESEND
/* ---- Resend: the events are read (a plain SELECT, page by page), then a
 * delivery of each is inserted in a transaction of its own ---------------- */
active proctype Resend() {
  byte e;
end_resend:             /* nothing left to resend: nothing done */
  atomic {
    if
    :: !gone[0] -> e = 0
    :: !gone[1] -> e = 1
    fi
  };
  atomic { insert(e); e = 0 }
}
#endif

/* ---- the reconciler's purge ------------------------------------------------- */
active proctype Purge() {
end_purge:
  do
#ifdef MUT_D_PURGEPENDING
  /* Mutant: DELETE FROM events WHERE created_at < NOW(6) - retention. */
  :: atomic { old[0] && !gone[0] -> assert(p9_lost || fanned[0]); gone[0] = 1 }
  :: atomic { old[1] && !gone[1] -> assert(p9_lost || fanned[1]); gone[1] = 1 }
#else
  /* PurgeEvents: the expired events after its cursor, then, per merchant
   * in one transaction, a locking read of their pending deliveries and the
   * DELETE of the others still expired (a resend's INSERT meanwhile waits
   * for it). p9 lost: no event is purged before the fan-out made its
   * delivery. */
  :: atomic { old[0] && !gone[0] && !PENDING_OF(0) -> assert(p9_lost || fanned[0]); gone[0] = 1 }
  :: atomic { old[1] && !gone[1] && !PENDING_OF(1) -> assert(p9_lost || fanned[1]); gone[1] = 1 }
#endif
  od
}

#define TICK(d) if :: dst[d] == D_PEND && !mine[d] && nat[d] > 0 -> nat[d] = nat[d] - 1 :: else -> skip fi

active proctype Clock() {
end_clock:
  do
  :: atomic { TICK(0); TICK(1); TICK(2) }
  :: atomic { !old[0] && (fanned[0] || LATEFAN) -> old[0] = 1 }
  :: atomic { !old[1] && (fanned[1] || LATEFAN) -> old[1] = 1 }
  od
}

/* ---- the endpoint's dispatcher ---------------------------------------------- */
#define DUE(d) (dst[d] == D_PEND && !mine[d] && nat[d] <= 0)
/* ORDER BY next_attempt_at, id LIMIT LIM: among the due ones (the clock
 * floors them all at now), the first LIM by id, the order they were made */
#define SEL(d) (DUE(d) && ((d > 0 && DUE(0)) + (d > 1 && DUE(1)) < LIM))

active proctype Dispatcher() {
  byte d;
  bit sel[ND];

end_claim:
  /* ClaimDeliveries: the endpoint's due deliveries that waited longest
   * (FOR UPDATE SKIP LOCKED), their tokens bumped and next attempts pushed
   * to the lease's end, their events read; a delivery whose event is gone
   * is failed with the reason (failGone: "its event was purged before it
   * could be delivered") in the same transaction. */
  atomic {
    DUE(0) || DUE(1) || DUE(2) ->
    d_step { sel[0] = SEL(0); sel[1] = SEL(1); sel[2] = SEL(2) };
#ifdef MUT_D_CLAIMERR
    /* Mutant: "the event … of delivery … is gone": the claim returns an
     * error, its transaction rolls back, nothing is claimed. */
    if
    :: (sel[0] && gone[dev[0]]) || (sel[1] && gone[dev[1]]) || (sel[2] && gone[dev[2]]) ->
         sel[0] = 0; sel[1] = 0; sel[2] = 0
    :: else -> skip
    fi;
#endif
    d = 0;
    do
    :: d < ND ->
         if
         :: sel[d] && gone[dev[d]] ->
              /* p9 lost: only a delivery made without its event fails for it */
              assert(p9_lost || orphan[d]);
              dst[d] = D_FAIL; why[d] = F_GONE
         :: sel[d] && !gone[dev[d]] -> mine[d] = 1; nat[d] = LEASE
         :: else -> skip
         fi;
         sel[d] = 0; d++
    :: else -> break
    od;
    d = 0
  };

  /* Dispatcher.attempt for each claimed one, then its record:
   * RecordDelivered (2xx), or RecordFailed (the next attempt after the
   * back-off, or failed past MaxAge), each fenced on the claim's token. */
  do
  :: atomic {
       mine[0] || mine[1] || mine[2] ->
       if
       :: mine[0] -> d = 0
       :: mine[1] -> d = 1
       :: mine[2] -> d = 2
       fi;
       if
       :: got[dev[d]] = 1; dst[d] = D_DONE
       :: att[d]++;
          if
          :: att[d] >= MAXTRY -> dst[d] = D_FAIL; why[d] = F_AGE
          :: else -> nat[d] = BACKOFF
          fi
       fi;
       mine[d] = 0; d = 0
     }
  :: atomic { !mine[0] && !mine[1] && !mine[2] -> goto end_claim }
  od
}

/* p9 live: every pending delivery ends, delivered or failed (weak fairness) */
ltl p9live { [] (((dst[0] == D_PEND) -> <> (dst[0] != D_PEND)) &&
                 ((dst[1] == D_PEND) -> <> (dst[1] != D_PEND)) &&
                 ((dst[2] == D_PEND) -> <> (dst[2] != D_PEND))) }
