-- | The host agent's decisions as a pure machine: which of its workers a
-- message from the master goes to, what of a worker's packet goes to
-- another worker of the host and what goes up the host link, when a
-- worker is numbered, welcomed, told its budget and handed the shared
-- values, and when the master hears that a worker is gone. The agent's
-- IO driver ("Herd.Node.Agent.Serve") owns the sockets and threads and
-- carries out the commands in order; it decides nothing of this.
--
-- The machine is polymorphic in the bytes it relays (@p@), so a test can
-- follow every message through it by label.
--
-- Promises (checked by @AgentSpec@ against a model under random hellos,
-- numberings in any order, entries, packets, losses, stops and limits):
--
-- * INV-AGENT-ROUTE: a message reaches a worker only while that worker is
--   numbered and neither lost nor stopped; each entry the master sends a
--   live worker reaches it once, in order; nothing else reaches it.
-- * INV-AGENT-FIRST: a numbered worker is told its budget and handed the
--   shared values before anything else is sent to it, then welcomed.
-- * INV-AGENT-GONE: the master hears 'WorkerGone' exactly once for each
--   numbered worker the host lost, never for one it stopped itself, nor
--   for one it never numbered.
-- * INV-RELAY on the host: a worker's part for another live worker of the
--   host goes to it directly, never up the host link; the rest of the
--   packet goes up under the sender's own number, in order.
module Herd.Core.Agent
  ( Agent
  , Token
  , newAgent
  , AgentEvent (..)
  , AgentCommand (..)
  , stepAgent
  , agentHolds
  , agentWorkers
  , agentLimit
  ) where

import qualified Data.Map.Strict as M
import qualified Data.Text as T
import Data.Word (Word32, Word64)
import Herd.Core.Base (WorkerId)
import Herd.Core.Wire.Host (GoneReason (..), HostControl (..), HostLimit (..))

-- | The host's number for a worker that asked the master for its own.
type Token = Word32

-- | What the agent knows of its workers.
data Agent = Agent
  { agPending   :: !(M.Map Token Int)       -- ^ asked to be numbered: their processes
  , agNextToken :: !Token
  , agLocals    :: !(M.Map WorkerId Int)    -- ^ numbered and not gone: their processes
  , agLimit     :: !HostLimit               -- ^ the memory limit the master sent
  } deriving (Eq, Show)

-- | An agent with no worker yet, and no memory limit.
newAgent :: Agent
newAgent = Agent M.empty 0 M.empty NoHostLimit

-- | What happens to an agent.
data AgentEvent p
  = LocalHello !Int !Word32
    -- ^ a local worker proved the secret and said hello: its process and
    -- the CPU it is pinned to
  | NumberingLate !Token
    -- ^ the master did not number this token's worker in time; it was refused
  | ControlCame !HostControl
    -- ^ a control message from the master (a share's piece is 'ShareCame')
  | EntryCame !WorkerId p
    -- ^ the master's entry for one worker: a packet for it
  | LocalPacket !WorkerId [(WorkerId, p)] [p]
    -- ^ a worker's packet: its parts for other workers of this host (as
    -- the driver split them out, by 'agentHolds'), and the rest
  | LocalGone !WorkerId !GoneReason
    -- ^ a worker's process or link ended, or the agent killed it for memory
  deriving (Eq, Show)

-- | What the driver is to do, in order.
data AgentCommand p
  = AskNumber !Token !Int !Word32
    -- ^ ask the master to number this token's worker ('AddWorker') and flush
  | OpenLocal !WorkerId !Int
    -- ^ set up the frames of this newly numbered worker (its process)
  | SendBudgets !HostLimit !Int ![WorkerId]
    -- ^ tell these workers their budget for shared values, as one of this
    -- many under this limit
  | SendHeldShares !WorkerId
    -- ^ hand this worker every shared value the host holds whole
  | WelcomeLocal !Token !WorkerId
    -- ^ answer the token's handshake: it is this worker
  | ToWorker !WorkerId p
    -- ^ a packet for this worker
  | ToMaster !WorkerId p
    -- ^ this worker's packet, as an entry of the host link's
  | Control !HostControl
    -- ^ say this to the master, and flush
  | HoldSharePiece !HostControl ![WorkerId]
    -- ^ keep this piece of a shared value ('HostShare'); if it completes
    -- the value, hand the value to these workers
  | ForgetShare !Word64
    -- ^ drop the shared value of this number ('HostUnshare')
  | Unlink !WorkerId
    -- ^ close this worker's link and forget its frames
  | KillLater !Int
    -- ^ kill this process if it is still there a little later
  | EndHost
    -- ^ the master closed the cluster: end the host link cleanly
  | Complain !String
    -- ^ a log line: the master said something that makes no sense here
  deriving (Eq, Show)

-- | Whether this worker is numbered here and not gone.
agentHolds :: Agent -> WorkerId -> Bool
agentHolds a w = M.member w (agLocals a)

-- | The workers numbered here and not gone, with their processes.
agentWorkers :: Agent -> [(WorkerId, Int)]
agentWorkers = M.toList . agLocals

-- | The memory limit the master sent.
agentLimit :: Agent -> HostLimit
agentLimit = agLimit

-- | One step of the agent.
stepAgent :: AgentEvent p -> Agent -> (Agent, [AgentCommand p])
stepAgent ev a = case ev of
  LocalHello pid cpu ->
    let t = agNextToken a
    in (a { agPending = M.insert t pid (agPending a), agNextToken = t + 1 }, [AskNumber t pid cpu])
  NumberingLate t -> (a { agPending = M.delete t (agPending a) }, [])
  ControlCame c -> control c a
  EntryCame w p
    | agentHolds a w -> (a, [ToWorker w p])
    | otherwise -> (a, [])   -- a worker gone: the master hears or heard of it
  LocalPacket w parts rest
    | agentHolds a w ->
        (a, [ ToWorker d p | (d, p) <- parts, agentHolds a d ] ++ map (ToMaster w) rest)
    | otherwise -> (a, [])   -- a worker already gone speaks for nobody
  LocalGone w why
    | agentHolds a w -> (a { agLocals = M.delete w (agLocals a) }, [Unlink w, Control (WorkerGone (fromIntegral w) why)])
    | otherwise -> (a, [])

-- The master's control messages.
control :: HostControl -> Agent -> (Agent, [AgentCommand p])
control c a = case c of
  WorkerAdded t wid -> case M.lookup t (agPending a) of
    Just pid ->
      let w = fromIntegral wid
          a' = a { agPending = M.delete t (agPending a), agLocals = M.insert w pid (agLocals a) }
      in (a', [OpenLocal w pid, SendBudgets (agLimit a) (M.size (agLocals a')) [w], SendHeldShares w, WelcomeLocal t w])
    Nothing ->
      -- its worker was refused meanwhile: the master must not wait for it
      (a, [Control (WorkerGone wid (GoneDied (T.pack "it was not numbered in time")))])
  StopWorker wid
    | Just pid <- M.lookup w (agLocals a) -> (a { agLocals = M.delete w (agLocals a) }, [Unlink w, KillLater pid])
    | otherwise -> (a, [])
    where w = fromIntegral wid
  CloseHost -> (a, [EndHost])
  HostMemoryLimit l -> (a { agLimit = l }, [SendBudgets l (M.size (agLocals a)) (M.keys (agLocals a))])
  HostShare {} -> (a, [HoldSharePiece c (M.keys (agLocals a))])
  HostUnshare n -> (a, [ForgetShare n])
  _ -> (a, [Complain ("the master sent " ++ show c ++ ", which only a host sends")])
