"""flashattn.bert_padding: FlashAttention-2's padding helpers (flash_attn.bert_padding), to move
between padded batches [batch, seqlen, ...] with an attention mask and the packed rows
[total, ...] with cu_seqlens that flash_attn_varlen_func takes. Same names, arguments and results
as FA2's current version; they take torch tensors (index_first_axis and index_put_first_axis
carry gradients through autograd) and NumPy arrays.

    unpadded, indices, cu_seqlens, max_seqlen, seqused = unpad_input(x, attention_mask)
    out = flash_attn_varlen_func(q_unpad, k_unpad, v_unpad, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen)
    padded = pad_input(out, indices, batch, seqlen)"""
from ._convert import _is_torch

_FUNCTIONS = {}


def _autograd_functions():
    """The torch.autograd.Functions of the index operations, built on first use (torch is optional)."""
    if not _FUNCTIONS:
        import torch

        class IndexFirstAxis(torch.autograd.Function):
            """input[indices] along the first axis; the gradient is scattered back into zeros."""

            @staticmethod
            def forward(ctx, input, indices):
                ctx.save_for_backward(indices)
                ctx.first_axis_dim = input.shape[0]
                return input.index_select(0, indices)

            @staticmethod
            def backward(ctx, grad_output):
                (indices,) = ctx.saved_tensors
                grad = grad_output.new_zeros((ctx.first_axis_dim,) + tuple(grad_output.shape[1:]))
                grad.index_copy_(0, indices, grad_output)
                return grad, None

        class IndexPutFirstAxis(torch.autograd.Function):
            """zeros [first_axis_dim, ...] with values written at indices; the gradient is gathered."""

            @staticmethod
            def forward(ctx, values, indices, first_axis_dim):
                ctx.save_for_backward(indices)
                out = values.new_zeros((first_axis_dim,) + tuple(values.shape[1:]))
                out.index_copy_(0, indices, values)
                return out

            @staticmethod
            def backward(ctx, grad_output):
                (indices,) = ctx.saved_tensors
                return grad_output.index_select(0, indices), None, None

        _FUNCTIONS.update(index=IndexFirstAxis, put=IndexPutFirstAxis)
    return _FUNCTIONS


def index_first_axis(input, indices):
    """input [n, ...] at the rows indices [total] (int64): [total, ...]."""
    if _is_torch(input):
        return _autograd_functions()["index"].apply(input, indices)
    return input[indices]


def index_put_first_axis(values, indices, first_axis_dim):
    """[first_axis_dim, ...] zeros with values [total, ...] at the rows indices."""
    if _is_torch(values):
        return _autograd_functions()["put"].apply(values, indices, first_axis_dim)
    import numpy as np
    out = np.zeros((first_axis_dim,) + tuple(values.shape[1:]), dtype=values.dtype)
    out[indices] = values
    return out


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """hidden_states [batch, seqlen, ...], attention_mask [batch, seqlen] (bool or int, nonzero:
    a token), unused_mask [batch, seqlen] (tokens kept in the packed rows but not attended to, or
    None). Returns (hidden_states [total, ...]: the tokens of attention_mask or unused_mask, in
    order; indices [total] int64 into the flattened [batch * seqlen]; cu_seqlens [batch + 1] int32;
    max_seqlen_in_batch, a Python int; seqused [batch] int32: the tokens of attention_mask alone in
    each sequence)."""
    if _is_torch(hidden_states) or _is_torch(attention_mask):
        import torch
        used = attention_mask != 0
        every = used | (unused_mask != 0) if unused_mask is not None else used
        seqlens = every.sum(dim=-1, dtype=torch.int32)
        seqused = used.sum(dim=-1, dtype=torch.int32)
        indices = torch.nonzero(every.flatten(), as_tuple=False).flatten()
        max_seqlen = int(seqlens.max().item()) if seqlens.numel() else 0
        cu_seqlens = torch.zeros(seqlens.shape[0] + 1, dtype=torch.int32, device=seqlens.device)
        cu_seqlens[1:] = torch.cumsum(seqlens, dim=0, dtype=torch.int32)
        flat = hidden_states.reshape((-1,) + tuple(hidden_states.shape[2:]))
    else:
        import numpy as np
        used = np.asarray(attention_mask) != 0
        every = used | (np.asarray(unused_mask) != 0) if unused_mask is not None else used
        seqlens = every.sum(axis=-1, dtype=np.int32)
        seqused = used.sum(axis=-1, dtype=np.int32)
        indices = np.flatnonzero(every.ravel())
        max_seqlen = int(seqlens.max()) if seqlens.size else 0
        cu_seqlens = np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int32)
        flat = hidden_states.reshape((-1,) + tuple(hidden_states.shape[2:]))
    return index_first_axis(flat, indices), indices, cu_seqlens, max_seqlen, seqused


def pad_input(hidden_states, indices, batch, seqlen):
    """The packed rows hidden_states [total, ...] back at indices in zeros [batch, seqlen, ...]."""
    out = index_put_first_axis(hidden_states, indices, batch * seqlen)
    return out.reshape((batch, seqlen) + tuple(out.shape[1:]))
