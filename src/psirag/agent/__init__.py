"""The R&A agent (paper Algorithm 3) and summarization mode (SPEC 2.4-2.5).

Both take the LLM (any ``ChatModel``, usually an ``LLMClient``) and retrieval as plain callables,
so they run over any index, or over a fake one in tests.
"""

from psirag.agent.grounding import names_in, names_without_documents
from psirag.agent.loop import (
    NOT_MENTIONED,
    AgentResult,
    AgentStats,
    RetrieveAndAnswer,
    Retriever,
    Step,
    answer_in_documents,
    lookup_query,
    merge_evidence,
)
from psirag.agent.parsing import ParsedReply, parse_reply
from psirag.agent.summarize import (
    DEFAULT_QUERY,
    Node,
    Summarizer,
    SummaryResult,
    VisitedNode,
    select_nodes,
)

__all__ = [
    "DEFAULT_QUERY",
    "NOT_MENTIONED",
    "AgentResult",
    "AgentStats",
    "Node",
    "ParsedReply",
    "RetrieveAndAnswer",
    "Retriever",
    "Step",
    "Summarizer",
    "SummaryResult",
    "VisitedNode",
    "answer_in_documents",
    "lookup_query",
    "merge_evidence",
    "names_in",
    "names_without_documents",
    "parse_reply",
    "select_nodes",
]
