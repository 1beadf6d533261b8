package main

import (
	"context"
	"fmt"
	"image/color"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The charts: fresh payments' throughput and p99 against the number of
// clients, for the gateway and its floor (a short phase per point), and,
// with --large, throughput against the table's size. SVG files in --charts.

// sweepPoint is one concurrency of the sweep.
type sweepPoint struct {
	Clients int   `json:"clients"`
	Gateway stats `json:"gateway"`
	Floor   stats `json:"floor"`
}

func parseSweep(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return nil, fmt.Errorf("--sweep: %q is not a number of clients (1-4096)", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// runSweep measures fresh payments at every concurrency of --sweep, floor
// then gateway, in phases of --sweep-duration.
func (b *bench) runSweep(ctx context.Context, hc *http.Client, rep *report) error {
	saved := b.opts.duration
	savedWarm := b.opts.warmup
	b.opts.duration, b.opts.warmup = b.opts.sweepDuration, min(b.opts.warmup, b.opts.sweepDuration/2)
	defer func() { b.opts.duration, b.opts.warmup = saved, savedWarm }()
	for _, n := range b.opts.sweepClients {
		fl, err := b.runPhase(ctx, fmt.Sprintf("sweep %d clients · floor", n), labels("floor", "sweep"), b.floorFreshGroup(fmt.Sprintf("sf%d", n), n, 0))
		if err != nil {
			return err
		}
		gw, _, err := b.gatewayPhase(ctx, fmt.Sprintf("sweep %d clients · gateway", n), "sweep", b.freshGroup(hc, "gateway", fmt.Sprintf("sg%d", n), n))
		if err != nil {
			return err
		}
		rep.Sweep = append(rep.Sweep, sweepPoint{Clients: n, Gateway: gw[0], Floor: fl[0]})
	}
	return nil
}

// writeCharts writes the run's charts into dir, and names them.
func writeCharts(rep *report, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	machine := fmt.Sprintf("%d CPUs, %s, %s", rep.CPUs, rep.DB.Version, rep.Started.Format("2006-01-02"))
	if len(rep.Sweep) > 0 {
		series := func(f func(sweepPoint) float64) plotter.XYs {
			var xy plotter.XYs
			for _, p := range rep.Sweep {
				xy = append(xy, plotter.XY{X: float64(p.Clients), Y: f(p)})
			}
			return xy
		}
		gwT := series(func(p sweepPoint) float64 { return p.Gateway.Throughput })
		flT := series(func(p sweepPoint) float64 { return p.Floor.Throughput })
		gwP := series(func(p sweepPoint) float64 { return p.Gateway.P99 })
		flP := series(func(p sweepPoint) float64 { return p.Floor.P99 })
		for _, c := range []struct {
			file, title, y string
			gw, fl         plotter.XYs
		}{
			{"throughput-vs-clients.svg", "Fresh payments: throughput", "payments/s", gwT, flT},
			{"p99-vs-clients.svg", "Fresh payments: p99 latency", "p99 (ms)", gwP, flP},
		} {
			p := plot.New()
			p.Title.Text = c.title + " (" + machine + ")"
			p.X.Label.Text = "concurrent clients (log scale)"
			p.Y.Label.Text = c.y
			p.X.Scale = plot.LogScale{}
			p.X.Tick.Marker = plot.LogTicks{Prec: -1}
			p.Legend.Top, p.Legend.Left = true, true
			if err := addLine(p, "gateway", c.gw, color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}); err != nil {
				return nil, err
			}
			if err := addLine(p, "raw-SQL floor (the flow's statements)", c.fl, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}); err != nil {
				return nil, err
			}
			path := filepath.Join(dir, c.file)
			if err := p.Save(7*vg.Inch, 4*vg.Inch, path); err != nil {
				return nil, err
			}
			files = append(files, path)
		}
	}
	if l := rep.Large; l != nil && len(l.TableSizes) > 1 {
		var xy plotter.XYs
		for i, n := range l.TableSizes {
			xy = append(xy, plotter.XY{X: float64(n) / 1e6, Y: l.Throughputs[i]})
		}
		p := plot.New()
		p.Title.Text = "Fresh payments, 64 clients, against table size (" + machine + ")"
		p.X.Label.Text = "payments and keys already in the tables (millions)"
		p.Y.Label.Text = "payments/s"
		p.Y.Min = 0
		if err := addLine(p, "gateway", xy, color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}); err != nil {
			return nil, err
		}
		path := filepath.Join(dir, "throughput-vs-table-size.svg")
		if err := p.Save(7*vg.Inch, 4*vg.Inch, path); err != nil {
			return nil, err
		}
		files = append(files, path)
	}
	return files, nil
}

func addLine(p *plot.Plot, name string, xy plotter.XYs, c color.Color) error {
	if len(xy) == 0 {
		return nil
	}
	line, points, err := plotter.NewLinePoints(xy)
	if err != nil {
		return err
	}
	line.Color, points.Color = c, c
	p.Add(line, points)
	p.Legend.Add(name, line, points)
	return nil
}
