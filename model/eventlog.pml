/*
 * eventlog.pml: GET /events paged with a cursor, checked by SPIN over every
 * interleaving of three transactions that each write one event of the
 * merchant (and commit or roll back), a consumer that pages on with its
 * cursor, and another listing of the same merchant running beside it.
 * Go: mysql/event.go (InsertEvent, LogEvents, MerchantEvents),
 * payments/event.go (Listings.Events: LogEvents, then the page), migration
 * 13 (event_log, events.log_pos).
 *
 * An event's pos is AUTO_INCREMENT, taken at its INSERT, long before its
 * transaction commits; its log_pos is given after the commit, by the
 * listing itself: LogEvents takes the merchant's counter (event_log FOR
 * UPDATE SKIP LOCKED: held by another listing → it places nothing), reads
 * the committed events without a log_pos (a locking read at READ
 * COMMITTED: it sees every committed event, skips those another LogEvents
 * holds, and cannot see an open transaction's), numbers them on from the
 * counter in pos order, and commits. LogEvents is two steps here (the
 * reads and its writes; the commit, or a failure), so a page may be read
 * between them. MerchantEvents reads the placed events after the cursor's log_pos,
 * in log_pos order, one per page (limit 1: the most pages, the most
 * interleavings).
 *
 * MUT_E_INSERTPOS is the listing before migration 13: committed events
 * paged on pos. MUT_E_PLACEOPEN places events whose transaction is still
 * open (a read that sees uncommitted rows).
 */

#define NEV 3           /* events, one per writing transaction */
#ifndef ROLLBACK
#define ROLLBACK 1      /* a writing transaction may roll back (its pos is then a gap) */
#endif
#ifndef ORUNS
#define ORUNS 2         /* listings the other request makes */
#endif
#ifndef GALERA
#define GALERA 0        /* the two listings run on two nodes of a Galera cluster: no lock holds across them */
#endif

#define E_NONE 0
#define E_OPEN 1        /* inserted, its transaction still open (its row locked) */
#define E_COMM 2        /* committed */
#define E_GONE 3        /* rolled back */
#define CONSUMER 1
#define OTHERREQ 2

/* ---- the rows ------------------------------------------------------------ */
byte  est[NEV];         /* the event's transaction */
byte  pos[NEV];         /* events.pos, AUTO_INCREMENT */
byte  lp[NEV];          /* events.log_pos as committed; 0 = NULL */
byte  autoinc = 1;
byte  nextpos = 1;      /* event_log.next_pos */
bit   held[2];          /* a listing's open LogEvents holds event_log's row (consumer, other) */
byte  base[2];          /* the next_pos it read */
byte  tent[2 * NEV];    /* the log_pos its open LogEvents wrote to an event (and holds its row); 0 none */
#define T(me, e) tent[((me) - 1) * NEV + (e)]
#define LOCKED(who, e) (!GALERA && T(who, e) != 0)

/* ---- the consumer ---------------------------------------------------------- */
byte  cursor;           /* the last event it listed: its log_pos (MUT_E_INSERTPOS: its pos) */
bit   seen[NEV];
byte  wdone;            /* writers finished */
bit   odone;            /* the other request finished */

bit   p8_cursor, p8_once, p8_all;   /* always 0: name the property in pan's message */

#ifdef MUT_E_INSERTPOS
#define VIS(e) (est[e] == E_COMM)
#define KEY(e) pos[e]
#else
#define VIS(e) (est[e] == E_COMM && lp[e] != 0)
#define KEY(e) lp[e]
#endif
/* p8 cursor: no event the consumer has not listed lies at or before its
 *   cursor, where it would never be listed */
#define PASSED(e) (VIS(e) && KEY(e) <= cursor && !seen[e])
#define CHECK assert(p8_cursor || !(PASSED(0) || PASSED(1) || PASSED(2)))

/* ---- a transaction writing an event: a settle, a claim, a resolution ----- */
proctype Writer(byte e) {
  /* BEGIN; UPDATE payments … event_seq = LAST_INSERT_ID(event_seq + 1);
   * InsertEvent: INSERT INTO events (pos AUTO_INCREMENT) */
  atomic { est[e] = E_OPEN; pos[e] = autoinc; autoinc++ };
  /* COMMIT (or ROLLBACK) */
  atomic {
    if
    :: est[e] = E_COMM
#if ROLLBACK
    :: est[e] = E_GONE
#endif
    fi;
    wdone++; CHECK
  }
}

/* LogEvents, its first step: the counter, then the committed unplaced
 * events, numbered on from it in pos order. */
inline take(me, k, p, e) {
  atomic {
    skip;
    if
    :: GALERA || (!held[0] && !held[1]) ->
         /* SELECT next_pos FROM event_log … FOR UPDATE SKIP LOCKED (on
          * Galera a lock holds on its own node only) */
         held[me - 1] = 1; base[me - 1] = nextpos; k = nextpos; p = 1;
         /* SELECT pos FROM events WHERE … AND log_pos IS NULL ORDER BY pos
          * FOR UPDATE SKIP LOCKED; UPDATE events SET log_pos = CASE pos … */
         d_step {
         do
         :: p < autoinc ->
              e = 0;
              do
              :: e < NEV && pos[e] != p -> e++
              :: else -> break
              od;
              if
#ifdef MUT_E_PLACEOPEN
              /* Mutant: a read that sees uncommitted rows places an event
               * whose transaction is still open. */
              :: e < NEV && (est[e] == E_COMM || est[e] == E_OPEN) && lp[e] == 0 && !LOCKED(3 - me, e) ->
                   T(me, e) = k; k++
#else
              :: e < NEV && est[e] == E_COMM && lp[e] == 0 && !LOCKED(3 - me, e) -> T(me, e) = k; k++
#endif
              :: else -> skip
              fi;
              p++
         :: else -> break
         od;
         p = 0; e = 0
         }
    :: else -> skip     /* held by another listing: it places the same events */
    fi
  }
}

/* LogEvents, its second step: UPDATE event_log SET next_pos (only when it
 * placed some); COMMIT. Or the transaction fails: nothing placed, and the
 * listing answers 500 (ok = 0). On Galera a commit whose writes meet those
 * of another node's commit since its read fails certification (1213). */
inline commit(me, k, e, ok) {
  atomic {
    ok = 1;
    if
    :: held[me - 1] ->
         if
         :: k == base[me - 1] || nextpos == base[me - 1] ->
              if
              :: d_step {
                   e = 0;
                   do
                   :: e < NEV -> if :: T(me, e) != 0 -> lp[e] = T(me, e) :: else -> skip fi; e++
                   :: else -> break
                   od;
                   e = 0
                 };
                 if :: k != base[me - 1] -> nextpos = k :: else -> skip fi
              :: ok = 0
              fi
         :: else -> ok = 0
         fi;
         d_step {
           e = 0;
           do
           :: e < NEV -> T(me, e) = 0; e++
           :: else -> break
           od;
           e = 0
         };
         held[me - 1] = 0; base[me - 1] = 0
    :: else -> skip
    fi;
    k = 0; CHECK
  }
}

/* MerchantEvents: the first placed event after the cursor (one per page). */
inline page(e, best, got) {
  atomic {
    d_step {
      e = 0; best = NEV; got = 0;
      do
      :: e < NEV ->
           if
           :: VIS(e) && KEY(e) > cursor && (best == NEV || KEY(e) < KEY(best)) -> best = e
           :: else -> skip
           fi;
           e++
      :: else -> break
      od;
      e = 0
    };
    if
    :: best < NEV ->
         assert(p8_once || !seen[best]);    /* p8 once: never listed twice */
         seen[best] = 1; cursor = KEY(best); got = 1
    :: else -> skip
    fi;
    e = 0; best = 0; CHECK
  }
}

#ifdef MUT_E_INSERTPOS
#define LIST page(e, best, got)
#else
#define LIST take(CONSUMER, k, p, e); commit(CONSUMER, k, e, ok); if :: ok -> page(e, best, got) :: else -> got = 0 fi
#endif

/* ---- the consumer: GET /events?starting_after=<its cursor>, again and again */
proctype Consumer() {
  byte k, p, e, best;
  bit got, ok = 1;

end_poll:
  do
  :: LIST
  :: atomic { wdone == NEV && odone -> break }
  od;
  /* every transaction ended: it pages on until a page comes back empty */
  do
  :: LIST;
     if
     :: ok && !got -> break
     :: else -> skip
     fi
  od;
  /* p8 all: it listed every committed event */
  assert(p8_all || ((est[0] != E_COMM || seen[0]) && (est[1] != E_COMM || seen[1]) && (est[2] != E_COMM || seen[2])))
}

/* ---- another listing of the same merchant (another consumer, another replica) */
proctype Other() {
  byte k, p, e, n;
  bit ok;
#ifndef MUT_E_INSERTPOS
  do
  :: n < ORUNS -> take(OTHERREQ, k, p, e); commit(OTHERREQ, k, e, ok); n++
  :: else -> break
  od;
#endif
  odone = 1
}

init {
  atomic { run Writer(0); run Writer(1); run Writer(2); run Consumer(); run Other() }
}
