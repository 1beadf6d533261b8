package books

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"
)

// Standing is what the books say now, for the metrics: the discrepancies no
// operator has resolved, by account and class, and each account's last
// complete run.
type Standing struct {
	Open         map[string]map[Class]int
	LastComplete map[string]time.Time
}

// Day is the UTC day that holds t, as a period.
func Day(t time.Time) (from, to time.Time) {
	from = t.UTC().Truncate(24 * time.Hour)
	return from, from.Add(24 * time.Hour)
}

// Due runs what the schedule owes now: for each account that can list its
// ledger, each of the last days UTC days that is closed and whose run is
// not complete. Every replica may run it at once: a period's run is claimed
// by one pass, and one complete is not run again.
func (j *Job) Due(ctx context.Context, accounts []string, days int) ([]Report, error) {
	var (
		out  []Report
		errs []error
	)
	today, _ := Day(j.cfg.Now())
	for _, account := range accounts {
		a, _, err := j.Listing(account)
		if err != nil {
			continue
		}
		for d := days; d >= 1; d-- {
			from := today.Add(-time.Duration(d) * 24 * time.Hour)
			to := from.Add(24 * time.Hour)
			if j.CheckPeriod(a, from, to) != nil {
				continue
			}
			rep, err := j.Reconcile(ctx, account, from, to, false)
			switch {
			case errors.Is(err, ErrRunComplete), errors.Is(err, ErrRunHeld):
				continue
			case err != nil:
				errs = append(errs, err)
			}
			if rep.Run.ID != 0 {
				out = append(out, rep)
			}
		}
	}
	return out, errors.Join(errs...)
}

// Scheduler runs the books' due periods on a schedule.
type Scheduler struct {
	cron   *cron.Cron
	cancel context.CancelFunc
}

// Schedule starts running j.Due for accounts on sched, reporting what the
// books say after each tick to standing (when set). Stop it with Stop.
func Schedule(sched cron.Schedule, j *Job, accounts []string, days int, standing func(Standing), log *slog.Logger) *Scheduler {
	ctx, cancel := context.WithCancel(context.Background())
	c := cron.New(cron.WithChain(cron.Recover(cronLogger{log}), cron.SkipIfStillRunning(cronLogger{log})))
	c.Schedule(sched, cron.FuncJob(func() {
		reps, err := j.Due(ctx, accounts, days)
		if err != nil && ctx.Err() == nil {
			log.Error("books: a run stopped short", "err", err)
		}
		for _, r := range reps {
			log.Info("books run", "account", r.Run.Account, "from", r.Run.From, "to", r.Run.To, "status", r.Run.Status,
				"lines", r.Run.Counts.Lines, "discrepancies", len(r.Discrepancies), "new", r.New)
		}
		if standing != nil {
			if st, err := j.cfg.Store.Standing(ctx); err == nil {
				standing(st)
			} else if ctx.Err() == nil {
				log.Error("books: reading the standing", "err", err)
			}
		}
	}))
	c.Start()
	return &Scheduler{cron: c, cancel: cancel}
}

// Stop cancels a running tick and waits for it to return.
func (s *Scheduler) Stop() {
	s.cancel()
	<-s.cron.Stop().Done()
}

type cronLogger struct{ log *slog.Logger }

func (l cronLogger) Info(msg string, kv ...any) { l.log.Debug("cron: "+msg, kv...) }
func (l cronLogger) Error(err error, msg string, kv ...any) {
	l.log.Error("cron: "+msg, append(kv, "err", err)...)
}
