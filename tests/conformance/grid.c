/* grid.c: the conformance grid. Not a Cartesian product (that would take hours on the float64
 * reference): each axis of the grid is swept around a base case, and the axes that
 * interact (causal x unequal lengths, GQA x varlen, dropout x masks, block-sparse x windows) are
 * crossed where they meet. The short grid (CI under sanitizers) keeps one case per axis value. */
#include "harness.h"

#include <stdio.h>
#include <string.h>

static const fa_dtype dtypes[3] = {FA_DTYPE_F32, FA_DTYPE_F16, FA_DTYPE_BF16};
static const char *const dtype_tag[3] = {"f32", "f16", "bf16"};

#define ADD(c)                                                                                                     \
    do {                                                                                                           \
        if (n < max)                                                                                               \
            cases[n++] = (c);                                                                                      \
    } while (0)

/* Whether a and b are the same case but for the dtype and the name. */
static int same_but_dtype(const conf_case *a, const conf_case *b)
{
    conf_case x, y;
    memcpy(&x, a, sizeof x);
    memcpy(&y, b, sizeof y);
    x.dtype = y.dtype = FA_DTYPE_F32;
    memset(x.name, 0, sizeof x.name);
    memset(y.name, 0, sizeof y.name);
    return memcmp(&x, &y, sizeof x) == 0;
}

/* An fp16 twin for every bf16 case that has no fp16 sibling of the same configuration. A bf16
 * case's bound is 2x / 3x the naive bf16 implementation's error, and bf16 keeps 8 significant
 * bits: an error of 1% in dS hides inside it in about half the bf16 cases. fp16 keeps 11 bits, so
 * its bound is about 8x tighter and the same fault shows; the twin holds the configuration (masks,
 * lengths, layout) of the bf16 case to it. The long cases (more than 300,000 query-key pairs per
 * head: the long backward walks and 1023 x 1023) get none: their float64 reference costs most of
 * the grid's time, and their masks and dS arithmetic are those of the shorter cases. */
static int add_f16_twins(conf_case *cases, int n, int max)
{
    int base = n;
    for (int i = 0; i < base; ++i) {
        if (cases[i].dtype != FA_DTYPE_BF16 || cases[i].seqlen_q * cases[i].seqlen_k > 300000)
            continue;
        int sibling = 0;
        for (int j = 0; j < base && !sibling; ++j)
            sibling = cases[j].dtype == FA_DTYPE_F16 && same_but_dtype(&cases[i], &cases[j]);
        if (sibling || n >= max)
            continue;
        char name[sizeof cases[i].name];
        snprintf(name, sizeof name, "%.110s-f16twin", cases[i].name);
        cases[n] = cases[i];
        cases[n].dtype = FA_DTYPE_F16;
        memcpy(cases[n].name, name, sizeof name);
        ++n;
    }
    return n;
}

int conf_grid(conf_case *cases, int max, int full)
{
    int n = 0;
    char name[128];

    /* head dims x dtypes, forward and backward */
    static const int64_t dims[] = {16, 32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i)
        for (int t = 0; t < 3; ++t) {
            if (!full && t != (int)(i % 3))
                continue;
            snprintf(name, sizeof name, "hdim%lld-%s", (long long)dims[i], dtype_tag[t]);
            conf_case c = conf_case_default(name);
            c.dtype = dtypes[t];
            c.d = dims[i];
            c.batch = 2;
            c.heads_q = 2;
            c.heads_kv = 2;
            c.seqlen_q = full ? 113 : 61;
            c.seqlen_k = full ? 129 : 67;
            c.backward = 1;
            ADD(c);
            /* a forward-only twin where a backend may have a forward but no backward kernel
             * (a case whose backward is unsupported is skipped whole) */
            if (dims[i] > 128) {
                snprintf(name, sizeof name, "hdim%lld-%s-fwd", (long long)dims[i], dtype_tag[t]);
                conf_case f = c;
                snprintf(f.name, sizeof f.name, "%s", name);
                f.backward = 0;
                f.causal = 1;
                ADD(f);
            }
        }

    /* sequence-length pairs, equal and unequal both ways, with and without causal */
    static const int64_t pairs[][2] = {{1, 1},     {3, 3},     {17, 17},   {113, 113}, {127, 127}, {128, 128},
                                       {129, 129}, {211, 211}, {1023, 1023}, {1024, 1024}, {1, 1024}, {1024, 1},
                                       {3, 129},   {129, 3},   {17, 211},  {211, 17},  {127, 1023}, {1023, 128},
                                       {113, 128}, {128, 113}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; ++i)
        for (int causal = 0; causal < 2; ++causal) {
            int big = pairs[i][0] > 500 || pairs[i][1] > 500;
            if (!full && (big || (i % 2) != (size_t)causal))
                continue;
            snprintf(name, sizeof name, "seqlen%lldx%lld%s", (long long)pairs[i][0], (long long)pairs[i][1],
                     causal ? "-causal" : "");
            conf_case c = conf_case_default(name);
            c.dtype = dtypes[(i + (size_t)causal) % 3];
            c.seqlen_q = pairs[i][0];
            c.seqlen_k = pairs[i][1];
            c.causal = causal;
            c.d = big ? 32 : 64;
            c.heads_q = c.heads_kv = big ? 1 : 2;
            c.batch = big ? 1 : 2;
            c.backward = 1;
            ADD(c);
        }

    /* long backward walks (full grid): more query tiles per key block than a kernel keeps stages
     * for (the Hopper backward's ring of 3 holds 3 x 64 query rows at d 128, 3 x 128 at d 64), at
     * the tensor-core head dims and dtypes, with GQA, causal and not */
    static const int64_t long_dims[] = {64, 128, 256};
    for (int i = 0; i < 3 && full; ++i)
        for (int causal = 0; causal < 2; ++causal) {
            snprintf(name, sizeof name, "longbwd-d%lld%s", (long long)long_dims[i], causal ? "-causal" : "");
            conf_case c = conf_case_default(name);
            c.dtype = i == 1 ? FA_DTYPE_F16 : FA_DTYPE_BF16;
            c.d = long_dims[i];
            c.batch = 1;
            c.heads_q = 4;
            c.heads_kv = 2;
            c.seqlen_q = 600;
            c.seqlen_k = 700;
            c.causal = causal;
            c.backward = 1;
            ADD(c);
        }

    /* d 256 backward with dropout (GQA), with a block mask, d 250 causal (unaligned rows): the sm80
     * column-split kernel's instances; varlen with a window (GQA): the sm90 one's; the same at d
     * 176 (padded: the backward to 256, the Hopper forward to 192 or 256; varlen copies K and V
     * without TMA) */
    for (int v = 0; v < 5 && full; ++v) {
        static const char *const tag[] = {"d256-dropout-bf16", "d256-blocksparse-f16", "d250-causal-f16",
                                          "d256-varlen-window-bf16", "d176-varlen-window-bf16"};
        snprintf(name, sizeof name, "bwd-%s", tag[v]);
        conf_case c = conf_case_default(name);
        c.dtype = v == 1 || v == 2 ? FA_DTYPE_F16 : FA_DTYPE_BF16;
        c.d = v == 2 ? 250 : v == 4 ? 176 : 256; /* 250: padded to the d 256 instance, unaligned rows */
        c.batch = 2;
        c.heads_q = 4;
        c.heads_kv = v >= 3 ? 1 : v ? 4 : 2;
        c.seqlen_q = 197;
        c.seqlen_k = 261;
        c.backward = 1;
        if (v >= 3) {
            static const int64_t lq[4] = {5, 0, 113, 64}, lk[4] = {7, 19, 0, 200};
            c.varlen = 1;
            c.batch = 4;
            memcpy(c.len_q, lq, sizeof lq);
            memcpy(c.len_k, lk, sizeof lk);
            c.window_left = 40;
            c.window_right = 4;
        } else if (v == 2) {
            c.causal = 1;
        } else if (v) {
            c.block = FA_BLOCK_RANDOM;
            c.block_q = 32;
            c.block_k = 64;
            c.block_density = 0.5;
        } else {
            c.dropout_p = 0.17f;
            c.seed = 7;
        }
        ADD(c);
    }

    /* GQA / MQA ratios 1, 2, 8 with batch > 1 */
    static const int64_t kv_heads[] = {8, 4, 1};
    for (int i = 0; i < 3; ++i)
        for (int causal = 0; causal < 2; ++causal) {
            if (!full && causal)
                continue;
            snprintf(name, sizeof name, "gqa%lld%s", (long long)(8 / kv_heads[i]), causal ? "-causal" : "");
            conf_case c = conf_case_default(name);
            c.dtype = dtypes[i];
            c.batch = 3;
            c.heads_q = 8;
            c.heads_kv = kv_heads[i];
            c.seqlen_q = 77;
            c.seqlen_k = 95;
            c.d = 32;
            c.causal = causal;
            c.backward = 1;
            ADD(c);
        }

    /* sliding windows, alone and with causal, unequal lengths */
    static const int64_t windows[][2] = {{16, 0}, {32, 8}, {-1, 5}, {7, -1}, {0, 0}, {3, 3}};
    for (int i = 0; i < 6; ++i)
        for (int causal = 0; causal < 2; ++causal) {
            if (!full && (i % 2) != causal)
                continue;
            snprintf(name, sizeof name, "window%lld_%lld%s", (long long)windows[i][0], (long long)windows[i][1],
                     causal ? "-causal" : "");
            conf_case c = conf_case_default(name);
            c.dtype = dtypes[i % 3];
            c.seqlen_q = 150;
            c.seqlen_k = 170 - 40 * causal;
            c.heads_q = 2;
            c.heads_kv = 1;
            c.window_left = windows[i][0];
            c.window_right = windows[i][1];
            c.causal = causal;
            c.backward = 1;
            ADD(c);
        }

    /* varlen packed batches with zero-length sequences, GQA, causal */
    for (int v = 0; v < 3; ++v)
        for (int causal = 0; causal < 2; ++causal) {
            if (!full && causal != (v % 2))
                continue;
            snprintf(name, sizeof name, "varlen%d%s", v, causal ? "-causal" : "");
            conf_case c = conf_case_default(name);
            c.dtype = dtypes[v];
            c.varlen = 1;
            c.batch = 4;
            static const int64_t lq[3][4] = {{5, 0, 113, 64}, {1, 130, 0, 17}, {0, 0, 70, 3}};
            static const int64_t lk[3][4] = {{7, 19, 0, 64}, {33, 100, 0, 17}, {0, 5, 70, 200}};
            memcpy(c.len_q, lq[v], sizeof lq[v]);
            memcpy(c.len_k, lk[v], sizeof lk[v]);
            c.heads_q = 4;
            c.heads_kv = v == 1 ? 1 : 2;
            c.d = 48;
            c.causal = causal;
            c.window_left = v == 2 ? 20 : -1;
            c.backward = 1;
            c.layout = v == 1 ? LAYOUT_PADDED : LAYOUT_CONTIGUOUS;
            ADD(c);
        }

    /* dropout 0.17 (p = 0 is every other case), with masks and GQA, forward and backward */
    for (int t = 0; t < 3; ++t)
        for (int causal = 0; causal < 2; ++causal) {
            if (!full && causal != (t % 2))
                continue;
            snprintf(name, sizeof name, "dropout-%s%s", dtype_tag[t], causal ? "-causal" : "");
            conf_case c = conf_case_default(name);
            c.dtype = dtypes[t];
            c.dropout_p = 0.17f;
            c.seed = 42 + (uint64_t)t;
            c.offset = 1000 * (uint64_t)t;
            c.batch = 2;
            c.heads_q = 4;
            c.heads_kv = 2;
            c.seqlen_q = 97;
            c.seqlen_k = 131;
            c.causal = causal;
            c.backward = 1;
            ADD(c);
        }

    /* block-sparse: patterns, densities, mask blocks that differ from the kernel tiles */
    struct {
        fa_block_pattern pat;
        int64_t bq, bk, param;
        double density;
        int per_head, causal;
        const char *tag;
    } sparse[] = {
        {FA_BLOCK_RANDOM, 32, 32, 0, 0.25, 0, 0, "random25"},
        {FA_BLOCK_RANDOM, 32, 32, 0, 0.5, 1, 0, "random50-perhead"},
        {FA_BLOCK_RANDOM, 48, 80, 0, 0.5, 0, 1, "random50-48x80-causal"},
        {FA_BLOCK_DENSE, 64, 64, 0, 1.0, 0, 0, "dense"},
        {FA_BLOCK_BUTTERFLY, 32, 32, 0, 0, 0, 0, "butterfly"},
        {FA_BLOCK_BUTTERFLY, 16, 128, 0, 0, 1, 1, "butterfly-16x128-causal"},
        {FA_BLOCK_LOCAL, 32, 32, 1, 0, 0, 0, "local1"},
        {FA_BLOCK_STRIDED, 24, 40, 3, 0, 0, 0, "strided3-24x40"},
        {FA_BLOCK_RANDOM, 32, 32, 0, 0.1, 0, 0, "random10"},
    };
    for (size_t i = 0; i < sizeof sparse / sizeof sparse[0]; ++i) {
        if (!full && i % 2)
            continue;
        snprintf(name, sizeof name, "blocksparse-%s", sparse[i].tag);
        conf_case c = conf_case_default(name);
        c.dtype = dtypes[i % 3];
        c.block = sparse[i].pat;
        c.block_q = sparse[i].bq;
        c.block_k = sparse[i].bk;
        c.block_param = sparse[i].param;
        c.block_density = sparse[i].density;
        c.block_per_head = sparse[i].per_head;
        c.causal = sparse[i].causal;
        c.seqlen_q = 200;
        c.seqlen_k = 260;
        c.heads_q = 2;
        c.heads_kv = 1;
        c.batch = 2;
        c.backward = 1;
        c.dropout_p = i == 2 ? 0.17f : 0.0f;
        ADD(c);
    }

    /* non-contiguous strides: padded, head-major, and padded outputs beside contiguous inputs (d 64:
     * the GPU kernels that copy such inputs in 16-byte words must still store O, dQ, dK and dV, whose
     * rows are not 16-byte aligned, element by element) */
    static const char *const layout_tag[] = {"", "padded", "bhsd", "padded-outputs"};
    for (int l = LAYOUT_PADDED; l <= LAYOUT_PADDED_OUTPUTS; ++l)
        for (int t = 0; t < 3; ++t) {
            if (!full && t != (l == LAYOUT_PADDED_OUTPUTS ? 2 : l))
                continue;
            snprintf(name, sizeof name, "strides-%s-%s", layout_tag[l], dtype_tag[t]);
            conf_case c = conf_case_default(name);
            c.dtype = dtypes[t];
            c.layout = (layout_kind)l;
            c.batch = 2;
            c.heads_q = 4;
            c.heads_kv = 2;
            c.seqlen_q = 70;
            c.seqlen_k = 90;
            c.d = l == LAYOUT_PADDED_OUTPUTS ? 64 : 40;
            c.causal = l == LAYOUT_PADDED_OUTPUTS || t == 1;
            c.backward = 1;
            ADD(c);
        }

    /* fully masked rows: causal with seqlen_q > seqlen_k, a window that misses, an empty block row */
    {
        conf_case c = conf_case_default("fullymasked-causal-sq>sk");
        c.seqlen_q = 100;
        c.seqlen_k = 40;
        c.causal = 1;
        c.backward = 1;
        c.dtype = FA_DTYPE_BF16;
        ADD(c);
        c = conf_case_default("fullymasked-window");
        c.seqlen_q = 90;
        c.seqlen_k = 30;
        c.window_left = 0;
        c.window_right = 0;
        c.backward = 1;
        ADD(c);
        c = conf_case_default("fullymasked-blockrow");
        /* diagonal blocks of 16 and a one-element window on the bottom-right diagonal j = i + 8:
         * rows with i % 16 >= 8 see only a key in the next block, which the mask drops */
        c.seqlen_q = 128;
        c.seqlen_k = 136;
        c.block = FA_BLOCK_LOCAL;
        c.block_q = 16;
        c.block_k = 16;
        c.block_param = 0;
        c.window_left = 0;
        c.window_right = 0;
        c.backward = 1;
        c.dtype = FA_DTYPE_F16;
        ADD(c);
    }

    /* custom scale, deterministic flag, seqlen_q = 0 and seqlen_k = 0 */
    {
        conf_case c = conf_case_default("scale-0.5-deterministic");
        c.scale = 0.5f;
        c.deterministic = 1;
        c.backward = 1;
        c.seqlen_q = 150;
        c.seqlen_k = 150;
        c.heads_q = 4;
        c.heads_kv = 1;
        ADD(c);
        /* the deterministic path under the other options (GPU backends run a different backward
         * kernel for it) */
        c = conf_case_default("deterministic-causal-gqa-bf16-d128");
        c.deterministic = 1;
        c.backward = 1;
        c.dtype = FA_DTYPE_BF16;
        c.d = 128;
        c.causal = 1;
        c.seqlen_q = 211;
        c.seqlen_k = 300;
        c.heads_q = 4;
        c.heads_kv = 2;
        c.batch = 2;
        ADD(c);
        c = conf_case_default("deterministic-dropout-blocksparse-varlen-f16-d64");
        c.deterministic = 1;
        c.backward = 1;
        c.dtype = FA_DTYPE_F16;
        c.d = 64;
        c.dropout_p = 0.17f;
        c.block = FA_BLOCK_RANDOM;
        c.block_q = 32;
        c.block_k = 32;
        c.block_density = 0.5;
        c.varlen = 1;
        c.batch = 3;
        c.len_q[0] = 130, c.len_q[1] = 0, c.len_q[2] = 77;
        c.len_k[0] = 190, c.len_k[1] = 64, c.len_k[2] = 129;
        c.heads_q = 2;
        c.heads_kv = 1;
        ADD(c);
        /* d 256 (the CUDA backend's SIMT family: the sm80 deterministic kernels stop at d
         * 128) and d 59 (unaligned rows: the sm80 kernels' ldg variant), with a window */
        c = conf_case_default("deterministic-d256-bf16");
        c.deterministic = 1;
        c.backward = 1;
        c.dtype = FA_DTYPE_BF16;
        c.d = 256;
        c.seqlen_q = 97;
        c.seqlen_k = 140;
        c.heads_q = 2;
        c.heads_kv = 2;
        ADD(c);
        c = conf_case_default("deterministic-d59-f16-window");
        c.deterministic = 1;
        c.backward = 1;
        c.dtype = FA_DTYPE_F16;
        c.d = 59;
        c.seqlen_q = 160;
        c.seqlen_k = 150;
        c.window_left = 50;
        c.window_right = 10;
        c.heads_q = 2;
        c.heads_kv = 1;
        c.batch = 2;
        ADD(c);
        c = conf_case_default("empty-keys");
        c.seqlen_k = 0;
        c.backward = 1;
        ADD(c);
        c = conf_case_default("empty-queries");
        c.seqlen_q = 0;
        c.backward = 1;
        ADD(c);
    }
    /* score modifiers (softcap, ALiBi per head and per sequence, both) on every kernel family's
     * head dims and dtypes, causal and not, unequal lengths (ALiBi's distance is bottom-right
     * aligned), GQA; then with varlen, windows, dropout, block masks and the deterministic path.
     * softcap 1.5 at the default scale and 20 at scale 1 both put scores where tanh bends. */
    {
        static const int64_t mod_dims[] = {64, 128, 256, 59};
        static const struct {
            const char *tag;
            float softcap, scale;
            int alibi;
        } mods[] = {{"softcap", 1.5f, 0.0f, 0}, {"alibi", 0.0f, 0.0f, 1}, {"softcap-alibi", 20.0f, 1.0f, 2}};
        for (size_t i = 0; i < sizeof mod_dims / sizeof mod_dims[0]; ++i)
            for (size_t m = 0; m < sizeof mods / sizeof mods[0]; ++m)
                for (int causal = 0; causal < 2; ++causal) {
                    int t = mod_dims[i] == 59 ? 0 : 1 + (int)((m + (size_t)causal) % 2); /* f32 or f16 / bf16 */
                    if (!full && (causal != (int)(m % 2) || i == 2))
                        continue;
                    snprintf(name, sizeof name, "%s-d%lld-%s%s", mods[m].tag, (long long)mod_dims[i], dtype_tag[t],
                             causal ? "-causal" : "");
                    conf_case c = conf_case_default(name);
                    c.dtype = dtypes[t];
                    c.d = mod_dims[i];
                    c.softcap = mods[m].softcap;
                    c.scale = mods[m].scale;
                    c.alibi = mods[m].alibi;
                    c.causal = causal;
                    c.batch = 2;
                    c.heads_q = 4;
                    c.heads_kv = 2;
                    c.seqlen_q = causal ? 200 : 131;
                    c.seqlen_k = causal ? 257 : 190;
                    c.backward = 1;
                    ADD(c);
                }
        conf_case c = conf_case_default("softcap-alibi-varlen-window-f16-d128");
        c.dtype = FA_DTYPE_F16;
        c.d = 128;
        c.softcap = 2.0f;
        c.alibi = 2;
        c.window_left = 70;
        c.window_right = 20;
        c.varlen = 1;
        c.batch = 3;
        c.len_q[0] = 150, c.len_q[1] = 0, c.len_q[2] = 77;
        c.len_k[0] = 190, c.len_k[1] = 64, c.len_k[2] = 129;
        c.heads_q = 4;
        c.heads_kv = 1;
        c.backward = 1;
        ADD(c);
        c = conf_case_default("softcap-alibi-dropout-blocksparse-bf16-d64");
        c.dtype = FA_DTYPE_BF16;
        c.d = 64;
        c.softcap = 1.5f;
        c.alibi = 1;
        c.dropout_p = 0.17f;
        c.block = FA_BLOCK_RANDOM;
        c.block_q = 32;
        c.block_k = 64;
        c.block_density = 0.6;
        c.causal = 1;
        c.seqlen_q = 180;
        c.seqlen_k = 240;
        c.heads_q = 2;
        c.heads_kv = 2;
        c.backward = 1;
        ADD(c);
        c = conf_case_default("softcap-alibi-deterministic-bf16-d128");
        c.dtype = FA_DTYPE_BF16;
        c.d = 128;
        c.softcap = 1.5f;
        c.alibi = 2;
        c.deterministic = 1;
        c.causal = 1;
        c.seqlen_q = 211;
        c.seqlen_k = 300;
        c.heads_q = 4;
        c.heads_kv = 2;
        c.batch = 2;
        c.backward = 1;
        ADD(c);
        c = conf_case_default("softcap-alibi-long-bf16-d128");
        c.dtype = FA_DTYPE_BF16;
        c.d = 128;
        c.softcap = 20.0f;
        c.scale = 1.0f;
        c.alibi = 1;
        c.seqlen_q = full ? 600 : 300;
        c.seqlen_k = full ? 700 : 300;
        c.heads_q = 2;
        c.heads_kv = 1;
        c.backward = 1;
        ADD(c);
    }

    /* the learnable sink with each option, in every dtype at two head dims (full grid), its values
     * random per head in [-2, 2]; causal and the window have more queries than keys, so rows that
     * see no key (O = 0, LSE = sink) meet rows that see some. A dominating sink (+8) and a very
     * negative one (-20) ride on two of the options. The short grid keeps four of them. */
    {
        enum { OPT_PLAIN, OPT_CAUSAL, OPT_WINDOW, OPT_VARLEN, OPT_GQA, OPT_MQA, OPT_DROPOUT, OPT_SOFTCAP,
               OPT_ALIBI, OPT_BLOCK, OPT_DETERMINISTIC, OPT_COUNT };
        static const char *const opt_tag[OPT_COUNT] = {"plain",   "causal",  "window-norows", "varlen",
                                                       "gqa",     "mqa",     "dropout",       "softcap",
                                                       "alibi",   "blocksparse", "deterministic"};
        static const int64_t sink_dims[2] = {64, 128};
        for (int o = 0; o < OPT_COUNT; ++o)
            for (int t = 0; t < 3; ++t)
                for (int di = 0; di < 2; ++di) {
                    const int sink_kind = o == OPT_DROPOUT && t == 2   ? SINK_LARGE
                                          : o == OPT_CAUSAL && t == 1 ? SINK_NEGATIVE
                                                                      : SINK_RANDOM;
                    /* short: causal f32, varlen f16, dropout bf16 (the large sink) and the
                     * deterministic path with a window in f32, at d 64 */
                    const int in_short = di == 0 && ((o == OPT_CAUSAL && t == 0) || (o == OPT_VARLEN && t == 1) ||
                                                     (o == OPT_DROPOUT && t == 2) || (o == OPT_DETERMINISTIC && t == 0));
                    if (!full && !in_short)
                        continue;
                    snprintf(name, sizeof name, "sink%s-%s-%s-d%lld",
                             sink_kind == SINK_LARGE ? "8" : sink_kind == SINK_NEGATIVE ? "-20" : "",
                             opt_tag[o], dtype_tag[t], (long long)sink_dims[di]);
                    conf_case c = conf_case_default(name);
                    c.dtype = dtypes[t];
                    c.d = sink_dims[di];
                    c.sink = sink_kind;
                    c.batch = 2;
                    c.heads_q = 4;
                    c.heads_kv = 2;
                    c.seqlen_q = 97;
                    c.seqlen_k = 83;
                    c.seed = 300 + (uint64_t)(o * 6 + t * 2 + di);
                    c.backward = 1;
                    switch (o) {
                    case OPT_CAUSAL: c.causal = 1; break; /* the first 14 rows see no key */
                    case OPT_WINDOW: /* a one-key window on the bottom-right diagonal: rows 0 .. 13 miss */
                        c.window_left = 0;
                        c.window_right = 0;
                        break;
                    case OPT_VARLEN: {
                        static const int64_t lq[4] = {5, 0, 90, 33}, lk[4] = {7, 19, 0, 60};
                        c.varlen = 1;
                        c.batch = 4;
                        memcpy(c.len_q, lq, sizeof lq);
                        memcpy(c.len_k, lk, sizeof lk);
                        c.causal = 1;
                        break;
                    }
                    case OPT_GQA: c.heads_q = 8; break;
                    case OPT_MQA:
                        c.heads_q = 8;
                        c.heads_kv = 1;
                        c.causal = 1;
                        break;
                    case OPT_DROPOUT: c.dropout_p = 0.17f; break;
                    case OPT_SOFTCAP: c.softcap = 1.5f; break;
                    case OPT_ALIBI:
                        c.alibi = 2;
                        c.causal = 1;
                        break;
                    case OPT_BLOCK:
                        c.block = FA_BLOCK_RANDOM;
                        c.block_q = 16;
                        c.block_k = 32;
                        c.block_density = 0.4;
                        break;
                    case OPT_DETERMINISTIC:
                        c.deterministic = 1;
                        c.window_left = 30;
                        c.window_right = 5;
                        break;
                    default: break;
                    }
                    ADD(c);
                }
    }

    /* a value head dim of its own (d_v != d): MLA's training shapes (192 / 128), narrower and
     * wider values at small dims (64 / 32, 40 / 72), forward and backward, causal, varlen and
     * GQA, every dtype (full grid); the short grid keeps one case per pair, and one with a sink */
    {
        static const int64_t dv_pairs[3][2] = {{192, 128}, {64, 32}, {40, 72}};
        static const char *const dv_opt[3] = {"causal", "varlen", "gqa"};
        for (int i = 0; i < 3; ++i)
            for (int o = 0; o < 3; ++o)
                for (int t = 0; t < 3; ++t) {
                    const int in_short = o == i && t == (i + 1) % 3;
                    if (!full && !in_short)
                        continue;
                    snprintf(name, sizeof name, "dv-d%lld-dv%lld-%s-%s", (long long)dv_pairs[i][0],
                             (long long)dv_pairs[i][1], dv_opt[o], dtype_tag[t]);
                    conf_case c = conf_case_default(name);
                    c.dtype = dtypes[t];
                    c.d = dv_pairs[i][0];
                    c.d_v = dv_pairs[i][1];
                    c.batch = 2;
                    c.heads_q = 2;
                    c.heads_kv = 2;
                    c.seqlen_q = full ? 113 : 61;
                    c.seqlen_k = full ? 129 : 67;
                    c.seed = 500 + (uint64_t)(i * 9 + o * 3 + t);
                    c.backward = 1;
                    if (o == 0) {
                        c.causal = 1;
                    } else if (o == 1) {
                        static const int64_t lq[3] = {40, 0, 77}, lk[3] = {50, 31, 0};
                        c.varlen = 1;
                        c.batch = 3;
                        memcpy(c.len_q, lq, sizeof lq);
                        memcpy(c.len_k, lk, sizeof lk);
                        c.causal = 1;
                    } else {
                        c.heads_q = 6;
                        c.heads_kv = i == 2 ? 1 : 2;
                    }
                    ADD(c);
                }
        conf_case c = conf_case_default("dv-d64-dv32-sink-gqa-causal-f16-padded");
        c.dtype = FA_DTYPE_F16;
        c.d = 64;
        c.d_v = 32;
        c.sink = SINK_RANDOM;
        c.causal = 1;
        c.batch = 2;
        c.heads_q = 4;
        c.heads_kv = 2;
        c.seqlen_q = 70;
        c.seqlen_k = 50;
        c.layout = LAYOUT_PADDED;
        c.backward = 1;
        ADD(c);
        c = conf_case_default("dv-d192-dv128-sink-dropout-deterministic-bf16-fwd");
        c.dtype = FA_DTYPE_BF16;
        c.d = 192;
        c.d_v = 128;
        c.sink = SINK_RANDOM;
        c.dropout_p = 0.17f;
        c.heads_q = 2;
        c.heads_kv = 1;
        c.seqlen_q = 90;
        c.seqlen_k = 110;
        if (full)
            ADD(c);
        c.backward = 1;
        c.deterministic = 1;
        snprintf(c.name, sizeof c.name, "dv-d192-dv128-sink-dropout-deterministic-bf16");
        if (full)
            ADD(c);
    }
    return add_f16_twins(cases, n, max);
}
