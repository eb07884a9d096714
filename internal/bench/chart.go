package bench

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	colorP50   = color.RGBA{R: 0x2b, G: 0x6c, B: 0xb0, A: 0xff}
	colorP99   = color.RGBA{R: 0x9e, G: 0xc5, B: 0xe8, A: 0xff}
	colorFlow  = color.RGBA{R: 0x2b, G: 0x6c, B: 0xb0, A: 0xff}
	colorOther = color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff}
)

// chartColumns returns the columns of results that have workload's metric, in table order.
func chartColumns(results []Result, workload, metric string) []column {
	var cols []column
	for _, c := range columns(results) {
		if _, ok := metricOf(results, c, workload, metric); ok {
			cols = append(cols, c)
		}
	}
	return cols
}

func metricOf(results []Result, c column, workload, metric string) (float64, bool) {
	for _, r := range results {
		if r.System == c.system && r.Variant == c.variant && r.Workload == workload && r.Error == "" {
			v, ok := r.Metrics[metric]
			return v, ok
		}
	}
	return 0, false
}

func chartLabel(c column) string {
	return c.system + "\n" + strings.ReplaceAll(c.variant, ",", "\n")
}

// WriteChart draws W1's p50 and p99 latency and W2's throughput of every system and variant in
// results, side by side, as a PNG at path.
func WriteChart(path string, results []Result) error {
	w1, err := w1Plot(results)
	if err != nil {
		return err
	}
	w2, err := w2Plot(results)
	if err != nil {
		return err
	}
	img := vgimg.NewWith(vgimg.UseWH(13*vg.Inch, 5*vg.Inch), vgimg.UseDPI(96))
	dc := draw.New(img)
	// A white background: a transparent PNG is unreadable on a dark page.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Inch / 2, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8,
		PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	plots := [][]*plot.Plot{{w1, w2}}
	canvases := plot.Align(plots, tiles, dc)
	w1.Draw(canvases[0][0])
	w2.Draw(canvases[0][1])
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func newPlot(title, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.BackgroundColor = color.Transparent
	p.Add(plotter.NewGrid())
	return p
}

// bars adds a bar series of values at offset, with its values written above the bars.
func bars(p *plot.Plot, values plotter.Values, width, offset vg.Length, c color.Color) (*plotter.BarChart, error) {
	b, err := plotter.NewBarChart(values, width)
	if err != nil {
		return nil, err
	}
	b.Color, b.Offset = c, offset
	b.LineStyle.Width = 0
	p.Add(b)
	xys := make(plotter.XYs, len(values))
	text := make([]string, len(values))
	for i, v := range values {
		xys[i] = plotter.XY{X: float64(i), Y: v}
		text[i] = formatValue(v)
	}
	labels, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: text})
	if err != nil {
		return nil, err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].XAlign = draw.XCenter
		labels.TextStyle[i].YAlign = draw.YBottom
		labels.TextStyle[i].Font.Size = vg.Points(9)
	}
	labels.Offset = vg.Point{X: offset}
	p.Add(labels)
	return b, nil
}

func w1Plot(results []Result) (*plot.Plot, error) {
	p := newPlot("W1: one workflow of 10 sequential steps, Start to Result", "latency (ms)")
	cols := chartColumns(results, "W1", "p50_ms")
	if len(cols) == 0 {
		return p, nil
	}
	var p50, p99 plotter.Values
	labels := make([]string, len(cols))
	for i, c := range cols {
		a, _ := metricOf(results, c, "W1", "p50_ms")
		b, _ := metricOf(results, c, "W1", "p99_ms")
		p50, p99 = append(p50, a), append(p99, b)
		labels[i] = chartLabel(c)
	}
	w := vg.Points(22)
	b50, err := bars(p, p50, w, -w/2, colorP50)
	if err != nil {
		return nil, fmt.Errorf("W1 chart: %w", err)
	}
	b99, err := bars(p, p99, w, w/2, colorP99)
	if err != nil {
		return nil, fmt.Errorf("W1 chart: %w", err)
	}
	p.Legend.Add("p50", b50)
	p.Legend.Add("p99", b99)
	p.Legend.Top = true
	p.Y.Max = 1.15 * slices.Max(p99)
	p.X.Min, p.X.Max = -0.5, float64(len(cols))-0.5
	p.NominalX(labels...)
	return p, nil
}

func w2Plot(results []Result) (*plot.Plot, error) {
	p := newPlot("W2: W1's workflow, 2,000 at once (quick: fewer)", "throughput (workflows/s)")
	cols := chartColumns(results, "W2", "wf_per_s")
	if len(cols) == 0 {
		return p, nil
	}
	labels := make([]string, len(cols))
	w := vg.Points(30)
	for i, c := range cols {
		v, _ := metricOf(results, c, "W2", "wf_per_s")
		p.Y.Max = max(p.Y.Max, 1.15*v)
		// One series per bar, so that Flow's and the others' bars differ in colour.
		col := colorOther
		if c.system == "flow" {
			col = colorFlow
		}
		if _, err := barsAt(p, i, v, w, col); err != nil {
			return nil, fmt.Errorf("W2 chart: %w", err)
		}
		labels[i] = chartLabel(c)
	}
	p.X.Min, p.X.Max = -0.5, float64(len(cols))-0.5
	p.NominalX(labels...)
	return p, nil
}

// barsAt adds one bar of value v at position x.
func barsAt(p *plot.Plot, x int, v float64, width vg.Length, c color.Color) (*plotter.BarChart, error) {
	b, err := plotter.NewBarChart(plotter.Values{v}, width)
	if err != nil {
		return nil, err
	}
	b.XMin = float64(x)
	b.Color = c
	b.LineStyle.Width = 0
	p.Add(b)
	labels, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: float64(x), Y: v}}, Labels: []string{formatValue(v)}})
	if err != nil {
		return nil, err
	}
	labels.TextStyle[0].XAlign = draw.XCenter
	labels.TextStyle[0].YAlign = draw.YBottom
	labels.TextStyle[0].Font.Size = vg.Points(9)
	p.Add(labels)
	return b, nil
}
