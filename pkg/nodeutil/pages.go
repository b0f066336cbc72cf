package nodeutil

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ListInPages lists with list, limit items a request, and hands each page
// to each, in order. The first page is a consistent read; the rest continue
// from the same snapshot.
func ListInPages[L interface{ GetContinue() string }](ctx context.Context, limit int64,
	list func(context.Context, metav1.ListOptions) (L, error), each func(L)) error {
	opts := metav1.ListOptions{Limit: limit}
	for {
		page, err := list(ctx, opts)
		if err != nil {
			return err
		}
		each(page)
		if page.GetContinue() == "" {
			return nil
		}
		opts.Continue = page.GetContinue()
	}
}
