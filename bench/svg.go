package bench

import (
	"fmt"
	"math"
	"strings"
)

// A small line-chart writer. The plots are simple (a few series of lines
// over linear or log axes), so a hundred lines of SVG are preferred to a
// plotting library and its dependency tree; the output is text, so plot
// changes show up in diffs.

// series is one line of a chart.
type series struct {
	name  string
	x, y  []float64
	color string
	dash  bool
	// step draws a step function (the value holds until the next point).
	step bool
}

// chart is a line chart.
type chart struct {
	title, xLabel, yLabel string
	logX, logY            bool
	width, height         int
	series                []series
	// yMin and yMax fix the y range when yMax > yMin.
	yMin, yMax float64
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

func (c *chart) svg() []byte {
	w, h := c.width, c.height
	if w == 0 {
		w, h = 900, 420
	}
	const left, right, top, bottom = 70, 190, 40, 50
	pw, ph := float64(w-left-right), float64(h-top-bottom)

	tx := func(v float64) float64 { return v }
	ty := tx
	if c.logX {
		tx = math.Log10
	}
	if c.logY {
		ty = math.Log10
	}
	x0, x1, y0, y1 := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range c.series {
		for i := range s.x {
			if bad(tx(s.x[i])) || bad(ty(s.y[i])) {
				continue
			}
			x0, x1 = math.Min(x0, tx(s.x[i])), math.Max(x1, tx(s.x[i]))
			y0, y1 = math.Min(y0, ty(s.y[i])), math.Max(y1, ty(s.y[i]))
		}
	}
	if c.yMax > c.yMin {
		y0, y1 = ty(c.yMin), ty(c.yMax)
	}
	if bad(x0) || x0 == x1 {
		x0, x1 = x0-1, x0+1
	}
	if bad(y0) || y0 == y1 {
		y0, y1 = y0-1, y0+1
	}
	xt, yt := ticks(x0, x1, c.logX), ticks(y0, y1, c.logY)
	if !c.logY && c.yMax <= c.yMin {
		y0, y1 = math.Min(y0, yt[0]), math.Max(y1, yt[len(yt)-1])
	}
	if c.logX {
		x0, x1 = math.Min(x0, xt[0]), math.Max(x1, xt[len(xt)-1])
	}
	if c.logY {
		y0, y1 = math.Min(y0, yt[0]), math.Max(y1, yt[len(yt)-1])
	}
	px := func(v float64) float64 { return float64(left) + (tx(v)-x0)/(x1-x0)*pw }
	py := func(v float64) float64 { return float64(top) + ph - (ty(v)-y0)/(y1-y0)*ph }
	pxT := func(t float64) float64 { return float64(left) + (t-x0)/(x1-x0)*pw }
	pyT := func(t float64) float64 { return float64(top) + ph - (t-y0)/(y1-y0)*ph }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(c.title))
	for _, t := range xt {
		if t < x0-1e-9 || t > x1+1e-9 {
			continue
		}
		x := pxT(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", x, top, x, float64(top)+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, float64(top)+ph+16, tickLabel(t, c.logX))
	}
	for _, t := range yt {
		if t < y0-1e-9 || t > y1+1e-9 {
			continue
		}
		y := pyT(t)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", left, y, float64(left)+pw, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, tickLabel(t, c.logY))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#333"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", float64(left)+pw/2, h-10, esc(c.xLabel))
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", float64(top)+ph/2, esc(c.yLabel))
	fmt.Fprintf(&b, `<clipPath id="plot"><rect x="%d" y="%d" width="%.0f" height="%.0f"/></clipPath>`+"\n", left, top, pw, ph)
	for k, s := range c.series {
		color := s.color
		if color == "" {
			color = palette[k%len(palette)]
		}
		var pts []string
		for i := range s.x {
			if bad(tx(s.x[i])) || bad(ty(s.y[i])) {
				continue
			}
			if s.step && len(pts) > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%s", px(s.x[i]), strings.Split(pts[len(pts)-1], ",")[1]))
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.x[i]), py(s.y[i])))
		}
		dash := ""
		if s.dash {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(&b, `<polyline clip-path="url(#plot)" fill="none" stroke="%s" stroke-width="1.6"%s points="%s"/>`+"\n", color, dash, strings.Join(pts, " "))
		if len(pts) <= 12 {
			for _, p := range pts {
				xy := strings.Split(p, ",")
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], color)
			}
		}
		ly := top + 10 + 18*k
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", w-right+12, ly, w-right+36, ly, color, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", w-right+42, ly+4, esc(s.name))
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

func bad(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }

// ticks returns tick positions (in transformed units for log axes).
func ticks(lo, hi float64, log bool) []float64 {
	if log {
		var out []float64
		for e := math.Floor(lo); e <= math.Ceil(hi); e++ {
			out = append(out, e)
		}
		return out
	}
	span := hi - lo
	step := math.Pow(10, math.Floor(math.Log10(span/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if span/(step*m) <= 7 {
			step *= m
			break
		}
	}
	var out []float64
	for t := math.Floor(lo/step) * step; t <= hi+step*1e-9; t += step {
		out = append(out, t)
	}
	if len(out) == 0 || out[len(out)-1] < hi {
		out = append(out, math.Ceil(hi/step)*step)
	}
	return out
}

func tickLabel(t float64, log bool) string {
	if log {
		v := math.Pow(10, t)
		switch {
		case v >= 1e6:
			return fmt.Sprintf("%gM", v/1e6)
		case v >= 1e3:
			return fmt.Sprintf("%gk", v/1e3)
		}
		return fmt.Sprintf("%g", v)
	}
	return fmt.Sprintf("%g", math.Round(t*1e6)/1e6)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
