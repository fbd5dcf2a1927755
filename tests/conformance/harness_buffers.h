/* harness_buffers.h: a tensor of the conformance harness (harness.c) in host and device memory:
 * the host image is followed by GUARD_BYTES guard bytes, which the device copy carries too, and an
 * output's elements start as POISON_BYTE, so that an overwritten guard, a written gap between
 * strided elements or an element never written shows after the call. */
#ifndef FA_HARNESS_BUFFERS_H
#define FA_HARNESS_BUFFERS_H

#include "harness.h"

#include <stddef.h>
#include <stdint.h>

#define GUARD_BYTES 64
#define GUARD_BYTE 0xA5
#define POISON_BYTE 0xFF /* all-ones is a NaN in fp32, fp16 and bf16 */

/* The determinism check's second run poisons every element with a NaN pattern of its own (the
 * first run's is all-ones bytes): 0x7FC1 is a quiet NaN in fp16 and bf16, 0x7FC17FC1 in fp32. */
#define SECOND_RUN_POISON 0x7FC1u

typedef struct tbuf {
    fa_tensor t;       /* data = device pointer */
    size_t bytes;      /* span of the elements */
    uint8_t *host;     /* host image: bytes + GUARD_BYTES */
    uint8_t *elem_map; /* 1 where an element lives (outputs: to find untouched gaps) */
    void *dev;
} tbuf;

/* strides for [outer, rows, heads, d] (ndim 4) or [rows, heads, d] (ndim 3) in a layout */
void make_strides(fa_tensor *t, layout_kind layout);
/* LSE strides ([b, h, s] or [h, total]): rows padded by 2 in LAYOUT_PADDED */
void make_lse_strides(fa_tensor *t, layout_kind layout);
/* Allocates b->t's host image and device buffer (output: elements poisoned, and the map of where
 * elements live); 0 when out of memory. */
int tbuf_alloc(fa_context *ctx, tbuf *b, int output);
/* the host image and its guard bytes to the device, and back */
fa_status tbuf_upload(fa_context *ctx, tbuf *b);
fa_status tbuf_download(fa_context *ctx, tbuf *b);
void tbuf_free(fa_context *ctx, tbuf *b);
/* The host image as a tensor (same strides), for the reference. */
fa_tensor tbuf_host_tensor(const tbuf *b);
/* element at offset off of the host image set to x in the buffer's dtype */
void set_elem(tbuf *b, int64_t off, double x);
/* every element of the host image from rng_normal */
void fill_normal(tbuf *b, uint64_t *rng);
/* Guard bytes untouched, gaps between strided elements untouched, every element written (a
 * downloaded output); otherwise 0, with why says which. */
int check_output_buffer(const char *name, const tbuf *b, char *why, size_t len);
/* every element (not the gaps) set to half_pattern (fp16 / bf16) or half_pattern twice (fp32) */
void poison_elements(tbuf *b, uint16_t half_pattern);
/* The offset of the first element that still holds the pattern, or -1. */
int64_t first_poisoned_element(const tbuf *b, uint16_t half_pattern);

#endif
